"""No secret of a job in any file it writes or any line it prints.

A password in a `--server` URL once went into every row's `meta.server`, the ledger and
the `--json` summary (and from there into the parquet and hf exports). Here a job runs
with a password in two server URLs (one of them dead, so its name is printed in a
take-out line) and an API key in SPECPILOT_API_KEY; then every file under the job's
folder and every export, and everything `generate`, `report` and `export` print and
the live page and /metrics answer, is searched for both.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.generate.dispatch.endpoints import resolve_endpoints
from specpilot.generate.job import JobConfig
from specpilot.generate.sampling import Sampling
from specpilot.status.live import LiveJob
from specpilot.status.server import bind, url_of, watch_job
from tests.fakeengines.standin import StandIn
from tests.fixtures.jobs import run_generate
from tests.fixtures.ports import free_port
from tests.generate.conftest import prompt_rows, read_output, write_jsonl

PASSWORD = "pw-PLANTED-4af1c9"
API_KEY = "sk-PLANTED-9c2e77"
PLANTED = (PASSWORD, API_KEY)


def _assert_clean(what: str, data: bytes) -> None:
    for secret in PLANTED:
        for form in (secret.encode(), base64.b64encode(f"trainer:{secret}".encode())):
            assert form not in data, f"{secret} found in {what}"


def test_no_secret_in_any_file_or_output_of_a_job(
    tmp_path: Path,
    fake_server: StandIn,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("SPECPILOT_API_KEY", API_KEY)
    good = f"http://trainer:{PASSWORD}@127.0.0.1:{fake_server.port}"
    dead = f"http://trainer:{PASSWORD}@127.0.0.1:{free_port()}/v1"
    inputs = write_jsonl(tmp_path / "in.jsonl", prompt_rows(12))
    out = tmp_path / "out"
    sock = bind("127.0.0.1:0", public=False, flag="--serve-status")
    served = watch_job(sock, out)
    answers: list[bytes] = []

    @contextlib.asynccontextmanager
    async def watch(job: LiveJob) -> AsyncIterator[object]:
        async with served(job):
            yield None
            async with aiohttp.ClientSession() as session:
                for path in ("", "metrics"):
                    async with session.get(url_of(sock) + path) as response:
                        assert response.status == 200
                        answers.append(await response.read())

    config = JobConfig(
        inputs, out, resolve_endpoints((good, dead), ()), None, Sampling(True),
        concurrency=4, retry_base_s=0.0, flush_interval_s=0.05, progress_interval_s=0.0,
    )  # fmt: skip
    outcome = run_generate(config, watch)
    assert outcome.exit_code == 0, outcome.message
    # the credentials did their job: the URL's password as Basic auth, the key where no URL has one
    basic = "Basic " + base64.b64encode(f"trainer:{PASSWORD}".encode()).decode()
    assert fake_server.counts.authorization == {basic}
    assert {row["meta"]["server"] for row in read_output(out)} == {f"127.0.0.1:{fake_server.port}"}
    printed = capsys.readouterr()
    outputs = {"generate (stdout, stderr)": (printed.out + printed.err).encode()}
    assert b"taken out" in outputs["generate (stdout, stderr)"]  # the dead server was named
    outputs.update({f"live {name}": body for name, body in zip(("page", "/metrics"), answers, strict=True)})

    runner = CliRunner()
    commands = [
        [
            "generate",
            "--input",
            str(inputs),
            "--output",
            str(out),
            "--server",
            good,
            "--server",
            dead,
            "--json",
        ],
        ["generate", "--input", str(inputs), "--output", str(out), "--server", good, "--server", dead],
        [
            "generate",
            "--input",
            str(inputs),
            "--output",
            str(out),
            "--server",
            f"http://u:{PASSWORD}@h:1?x=1",
        ],
        ["report", str(out)],
        ["report", str(out), "--json"],
    ]
    commands += [
        ["export", str(out), "--format", fmt, "--json"]
        for fmt in ("specforge", "speculators", "parquet", "hf")
    ]
    for argv in commands:
        result = runner.invoke(cli, argv)
        assert result.exception is None or isinstance(result.exception, SystemExit), result.output
        outputs[" ".join(argv)] = (result.stdout + result.stderr).encode()
    assert f'"127.0.0.1:{fake_server.port}"'.encode() in outputs[" ".join(commands[0])]

    files = [path for path in tmp_path.rglob("*") if path.is_file() and path != inputs]
    written = {str(path.relative_to(tmp_path)) for path in files}
    # the files a job writes, and one of each export: none may be missed by the search below
    for expected in ("out/ledger.sqlite", "out/manifest.json", "out/errors.jsonl", "out/rejected.jsonl",
                     "out/data/part-00000.jsonl", "out/specforge.jsonl", "out/speculators.jsonl",
                     "out/hf/state.json"):  # fmt: skip
        assert expected in written
    assert any(name.startswith("out/parquet/") for name in written)
    for path in files:
        _assert_clean(str(path), path.read_bytes())
    for what, data in outputs.items():
        _assert_clean(what, data)
