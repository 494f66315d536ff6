"""The live status page in a real browser, and /metrics through the real Prometheus parser.

A real `specpilot generate --serve-status` process runs against two stand-in servers
that hold the last rows' answers, so the job stays running in a state the ledger pins
down exactly; headless Chromium then loads the page and the test compares what it
rendered with the ledger, and saves a screenshot (its path is printed).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specpilot.status.server import LEDGER_REFRESH_S
from tests.fakeengines.standin import ACCEPT_LENGTH, Config, StandIn, completion_tokens_for
from tests.fixtures.ports import free_port
from tests.generate.conftest import write_jsonl

REPO_ROOT = Path(__file__).resolve().parents[2]
ROWS = 80
HELD = set(range(70, 80))
TOO_LONG = {10, 20, 30, 40}
RETRY = {5, 15, 25}
EMPTY = {6, 16, 26}
API_KEY = "sk-standin-secret-0123456789"
PROMPT_WORDS = "confidential prompt words"


def _prompt(number: int) -> str:
    markers = [
        name
        for name, rows in (("HOLD", HELD), ("TOO-LONG", TOO_LONG), ("RETRY", RETRY), ("EMPTY", EMPTY))
        if number in rows
    ]
    return " ".join([PROMPT_WORDS, *markers, str(number)])


def _ledger_counts(out: Path) -> dict[int, int]:
    """Rows per state ({} while the job has not created its ledger yet)."""
    if not (out / "ledger.sqlite").exists():
        return {}
    with contextlib.closing(sqlite3.connect(f"file:{out / 'ledger.sqlite'}?mode=ro", uri=True)) as db:
        try:
            return dict(db.execute("SELECT state, COUNT(*) FROM rows GROUP BY state").fetchall())
        except sqlite3.OperationalError:  # the schema is not there yet
            return {}


@dataclass
class RunningJob:
    out: Path
    url: str
    servers: list[StandIn]
    process: subprocess.Popen[str]


@contextlib.contextmanager
def _held_job(tmp_path: Path, serve_status: bool) -> Iterator[RunningJob]:
    """A job with every row answered or failed except the held ones, which stay in flight."""
    retried: set[str] = set()
    config = Config(answers="scripted", metrics="sglang", served_name="standin-model")
    servers = [StandIn(config=config, retried=retried).start() for _ in range(2)]
    rows = [{"id": f"q{i}", "conversations": [{"role": "user", "content": _prompt(i)}]} for i in range(ROWS)]
    path = write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out"
    port = free_port()
    argv = [sys.executable, "-m", "specpilot", "generate", "--input", str(path), "--output", str(out),
            "--server", servers[0].url, "--server", servers[1].url, "--concurrency", "16",
            "--retry-base-s", "0.01", "--flush-interval-s", "0.05", "--max-tokens", "512", "--json"]  # fmt: skip
    if serve_status:
        argv += ["--serve-status", f"127.0.0.1:{port}"]
    env = {**os.environ, "SPECPILOT_API_KEY": API_KEY}
    process = subprocess.Popen(
        argv, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        expected = {2: ROWS - len(HELD) - len(TOO_LONG), 3: len(TOO_LONG), 1: len(HELD)}
        deadline = time.monotonic() + 60
        while _ledger_counts(out) != expected:
            assert process.poll() is None, process.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the job did not reach its held state"
            time.sleep(0.1)
        job = RunningJob(out, f"http://127.0.0.1:{port}/", servers, process)
        if serve_status:
            _wait_for_the_page(job, expected[2])
        yield job
        for server in servers:
            server.release()
        stdout, stderr = process.communicate(timeout=60)
        assert process.returncode == 1, stderr  # the TOO-LONG rows failed
        assert '"done": 76' in stdout
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        for server in servers:
            server.close()


def _wait_for_the_page(job: RunningJob, done: int, within_s: float = 60.0) -> None:
    """Until the page shows the held state: it caches the ledger (LEDGER_REFRESH_S) and its
    history needs two one-second samples per server. Waited on, not slept (a fixed sleep of
    the refresh plus 2.5 s was too short on a loaded machine and too long on a quiet one)."""
    names = {server.url.split("//")[1] for server in job.servers}
    deadline = time.monotonic() + within_s
    while True:
        page = _Page()
        with contextlib.suppress(OSError), urllib.request.urlopen(job.url, timeout=10) as response:
            page.feed(response.read().decode())
        lines = [p for p in page.polylines if p["data-name"] in names]
        if (
            page.text.get("rows-done") == str(done)
            and len(lines) >= 4
            and all(int(p["data-points"]) >= 2 for p in lines)
        ):
            return
        assert job.process.poll() is None, job.process.communicate()[1][-2000:]
        assert time.monotonic() < deadline, f"the page did not show the held job in {within_s} s"
        time.sleep(LEDGER_REFRESH_S / 4)


@pytest.fixture
def running_job(tmp_path: Path) -> Iterator[RunningJob]:
    with _held_job(tmp_path, serve_status=True) as job:
        yield job


VOID_TAGS = frozenset({"meta", "br", "img", "input", "link", "hr"})


class _Page(HTMLParser):
    """Text of elements by id, rows of tables by id, and the plotted polylines."""

    def __init__(self) -> None:
        super().__init__()
        self.text: dict[str, str] = {}
        self.tables: dict[str, list[list[str]]] = {}
        self.polylines: list[dict[str, str]] = []
        self.bars: list[int] = []
        self._open: list[tuple[str, str | None]] = []  # (tag, id) of the elements we are in
        self._table: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        if tag == "table" and "id" in found:
            self._table = found["id"]
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table:
            self._cell = []
        elif tag == "polyline":
            self.polylines.append(found)
        elif tag == "rect" and "data-count" in found:
            self.bars.append(int(found["data-count"]))
        if tag not in VOID_TAGS:
            self._open.append((tag, found.get("id")))
        if "id" in found:
            self.text[found["id"]] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._table = None
        elif tag in ("td", "th") and self._table and self._cell is not None:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        while self._open:
            if self._open.pop()[0] == tag:
                break

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        for _, element_id in self._open:
            if element_id is not None:
                self.text[element_id] += data


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "headless Chromium is missing: scripts/test.sh installs it (apt-get install chromium)"
    return found


def _browser(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ]
    return subprocess.run(
        [_chromium(), *flags, *args], capture_output=True, text=True, timeout=120, check=True
    )


def test_page_in_headless_chromium_matches_the_ledger(running_job: RunningJob, tmp_path: Path) -> None:
    dom = _browser(tmp_path, "--dump-dom", running_job.url).stdout
    page = _Page()
    page.feed(dom)
    ledger = running_job.out / "ledger.sqlite"
    with contextlib.closing(sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)) as db:
        (done, failed, in_flight, retries, tokens) = db.execute(
            "SELECT SUM(state = 2), SUM(state = 3), SUM(state = 1), SUM(MAX(attempts - 1, 0)), "
            "SUM(completion_tokens) FROM rows"
        ).fetchone()
        flagged = {row_id for (row_id,) in db.execute("SELECT id FROM rows WHERE flags != 0")}
    assert page.text["rows-done"] == str(done) == str(ROWS - len(HELD) - len(TOO_LONG))
    assert page.text["rows-failed"] == str(failed) == str(len(TOO_LONG))
    assert page.text["rows-in-flight"] == str(in_flight) == str(len(HELD))
    assert page.text["rows-pending"] == "0" and page.text["rows-total"] == str(ROWS)
    assert page.text["retries"] == str(retries) == str(len(RETRY))
    assert page.text["completion-tokens"] == str(tokens)
    assert page.text["accept-length"] == f"{ACCEPT_LENGTH:.2f}"
    assert "87.5% of rows finished" in page.text["progress"]
    # each stand-in server has a rows/s line with points (from the one-second samples)
    per_server = [
        p for p in page.polylines if p["data-name"] in {s.url.split("//")[1] for s in running_job.servers}
    ]
    assert len(per_server) >= 4 and all(int(p["data-points"]) >= 2 for p in per_server)
    assert all(len(p["points"].split()) == int(p["data-points"]) for p in page.polylines)
    # the length histogram holds every done row
    assert sum(page.bars) == done
    expected_lengths = {completion_tokens_for(_prompt(i)) for i in range(ROWS) if i not in HELD | TOO_LONG}
    assert tokens == sum(completion_tokens_for(_prompt(i)) for i in range(ROWS) if i not in HELD | TOO_LONG)
    assert len(expected_lengths) > 1
    # servers: both up, the held rows in flight between them, the answered rows split between them
    servers = page.tables["servers"][1:]
    assert [row[1] for row in servers] == ["up", "up"]
    assert sum(int(row[2]) for row in servers) == len(HELD)
    assert sum(int(row[3]) for row in servers) == done
    assert page.tables["retries-by-cause"][1:] == [["http_429", str(len(RETRY))]]
    assert page.tables["failed-by-cause"][1:] == [["http_400", str(len(TOO_LONG))]]
    assert {row[0] for row in page.tables["flagged"][1:]} == flagged == {f"q{i}" for i in EMPTY}
    assert {row[0] for row in page.tables["failed"][1:]} == {f"q{i}" for i in TOO_LONG}
    # ids and errors, never prompt text or the API key
    assert PROMPT_WORDS not in dom and API_KEY not in dom
    shot = tmp_path / "status-page.png"
    _browser(tmp_path, f"--screenshot={shot}", "--window-size=1360,1700", running_job.url)
    print(f"status page screenshot: {shot}")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_metrics_parse_with_prometheus_client(running_job: RunningJob) -> None:
    with urllib.request.urlopen(running_job.url + "metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples
    }
    done = ROWS - len(HELD) - len(TOO_LONG)
    assert samples[("specpilot_rows", (("state", "done"),))] == done
    assert samples[("specpilot_rows", (("state", "failed"),))] == len(TOO_LONG)
    assert samples[("specpilot_rows", (("state", "in_flight"),))] == len(HELD)
    assert samples[("specpilot_rows", (("state", "pending"),))] == 0
    assert families["specpilot_rows_done"].type == "counter"
    assert samples[("specpilot_rows_done_total", ())] == done
    assert samples[("specpilot_prompt_tokens_total", ())] == 7 * done
    assert samples[("specpilot_retries_total", (("cause", "http_429"),))] == len(RETRY)
    assert samples[("specpilot_failed_rows", (("cause", "http_400"),))] == len(TOO_LONG)
    assert samples[("specpilot_flagged_rows", (("flag", "empty_content"),))] == len(EMPTY)
    assert samples[("specpilot_spec_accept_length", ())] == ACCEPT_LENGTH
    assert families["specpilot_request_duration_seconds"].type == "histogram"
    names = [s.url.split("//")[1] for s in running_job.servers]
    answered = [samples[("specpilot_request_duration_seconds_count", (("server", n),))] for n in names]
    assert sum(answered) == done and all(answered)
    in_flight = [samples[("specpilot_server_in_flight_requests", (("server", n),))] for n in names]
    assert sum(in_flight) == len(HELD)
    assert all(samples[("specpilot_server_up", (("server", n),))] == 1 for n in names)
    assert API_KEY not in text and PROMPT_WORDS not in text


def test_view_reads_a_running_job_without_disturbing_it(tmp_path: Path) -> None:
    """A job started without --serve-status: `specpilot view` reads its live ledger (WAL readers
    are not blocked by the writer), and the job then finishes normally."""
    with _held_job(tmp_path, serve_status=False) as job:
        names_before = sorted(p.name for p in job.out.iterdir())
        port = free_port()
        argv = [sys.executable, "-m", "specpilot", "view", str(job.out), "--addr", f"127.0.0.1:{port}"]
        view = subprocess.Popen(argv, cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
                        html = response.read().decode()
                    break
                except OSError:
                    assert view.poll() is None and time.monotonic() < deadline, view.communicate()[1]
                    time.sleep(0.1)
        finally:
            view.terminate()
            view.communicate(timeout=10)
        page = _Page()
        page.feed(html)
        assert page.text["rows-done"] == str(ROWS - len(HELD) - len(TOO_LONG))
        assert page.text["rows-in-flight"] == str(len(HELD))
        assert "read from the ledger" in html and "not watched" in html
        assert sorted(p.name for p in job.out.iterdir()) == names_before
