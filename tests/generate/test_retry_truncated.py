"""`--retry-truncated --max-tokens N`: truncated rows generated again at the larger budget, once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.errors import UserError
from specpilot.generate.ledger.store import Ledger
from tests.fakeengines.standin import CUT_MARKER, Faults, StandIn
from tests.fixtures.jobs import run_generate
from tests.generate.conftest import prompt_rows, read_output
from tests.generate.test_job import _config

ROWS = [*prompt_rows(5), *({"id": f"cut{i}", "prompt": f"{CUT_MARKER} {i}"} for i in range(3))]
FULL_BUDGET = 100  # the stand-in answers CUT prompts in full from this --max-tokens on


def _flagged(out: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for part in sorted((out / "flagged").glob("part-*.jsonl")) for line in part.open()
    ]


@pytest.fixture
def server() -> Any:
    server = StandIn(Faults(cut_unless_max_tokens=FULL_BUDGET)).start()
    yield server
    server.close()


def _run(tmp_path: Path, server: StandIn, **extra: Any) -> Any:
    return run_generate(_config(tmp_path, [server], 0, input_rows=ROWS, **extra))


def test_truncated_rows_are_generated_again_once_at_the_larger_budget(
    tmp_path: Path, server: StandIn
) -> None:
    first = _run(tmp_path, server, max_tokens=50)
    assert first.exit_code == 0 and first.summary.flagged == 3 and len(_flagged(tmp_path / "out")) == 3
    again = _run(tmp_path, server, max_tokens=FULL_BUDGET, retry_truncated=True)
    assert again.exit_code == 0, again.message
    assert again.summary.flagged == 0 and again.summary.done == 8 and again.summary.flags["truncated"] == 0
    rows = read_output(tmp_path / "out")
    assert sorted(r["id"] for r in rows) == sorted(r["id"] for r in ROWS)  # each once, all clean now
    assert _flagged(tmp_path / "out") == []
    per_prompt = server.counts.per_prompt
    assert all(per_prompt[f"{CUT_MARKER} {i}"] == 2 for i in range(3))  # once per run
    assert all(per_prompt[f"q {i}"] == 1 for i in range(5))  # the clean rows are not sent again
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["params"]["max_tokens"] == FULL_BUDGET
    # the job now runs at the new budget: a plain resume with it is the same job
    assert _run(tmp_path, server, max_tokens=FULL_BUDGET).exit_code == 0


def test_a_budget_no_larger_or_missing_is_refused(tmp_path: Path, server: StandIn) -> None:
    assert _run(tmp_path, server, max_tokens=50).exit_code == 0
    before = sorted(p.read_bytes() for p in (tmp_path / "out").rglob("part-*.jsonl"))
    base = ["generate", "--input", str(tmp_path / "in.jsonl"), "--output", str(tmp_path / "out")]
    base += ["--server", server.url, "--retry-truncated"]
    for extra, said in ((["--max-tokens", "50"], "no larger than the 50"), ([], "needs the larger budget")):
        result = CliRunner().invoke(cli, [*base, *extra])
        assert result.exit_code == 2 and said in result.output, result.output
    assert sorted(p.read_bytes() for p in (tmp_path / "out").rglob("part-*.jsonl")) == before


def test_retry_truncated_on_a_new_job_is_refused(tmp_path: Path, server: StandIn) -> None:
    with pytest.raises(UserError, match="no truncated rows to retry"):
        _run(tmp_path, server, max_tokens=FULL_BUDGET, retry_truncated=True)


def test_a_kill_between_rewrite_and_commit_still_writes_each_row_once(
    tmp_path: Path, server: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _run(tmp_path, server, max_tokens=50).exit_code == 0

    def killed(self: Ledger, *args: object) -> None:
        raise KeyboardInterrupt  # the part is rewritten, the ledger not yet told

    with monkeypatch.context() as patch:
        patch.setattr(Ledger, "requeue_lost", killed)
        with pytest.raises(KeyboardInterrupt):
            _run(tmp_path, server, max_tokens=FULL_BUDGET, retry_truncated=True)
    again = _run(tmp_path, server, max_tokens=FULL_BUDGET, retry_truncated=True)
    assert again.exit_code == 0 and again.summary.done == 8 and again.summary.flagged == 0
    assert sorted(r["id"] for r in read_output(tmp_path / "out")) == sorted(r["id"] for r in ROWS)
    assert _flagged(tmp_path / "out") == []


def test_a_retry_killed_after_it_began_resumes_and_names_the_budget_the_rows_were_cut_at(
    tmp_path: Path, server: StandIn
) -> None:
    # once refused with "--max-tokens 100 is no larger than the 100 the rows were cut off at" (cut at 50)
    from specpilot.generate.job import Job

    assert _run(tmp_path, server, max_tokens=50).summary.flagged == 3
    notes: list[str] = []
    killed = Job(
        _config(tmp_path, [server], 0, input_rows=ROWS, max_tokens=FULL_BUDGET, retry_truncated=True)
    )
    killed.prepare("fake-model")  # the rows are queued again and the budget moved; then kill -9
    killed.close()
    again = _run(tmp_path, server, max_tokens=FULL_BUDGET, retry_truncated=True, notify=notes.append)
    assert again.exit_code == 0, again.message
    assert again.summary.flagged == 0 and again.summary.done == 8
    assert any("cut off at 50" in note for note in notes)
    with pytest.raises(UserError, match="no larger than the 100 the rows were cut off at"):
        _run(tmp_path, server, max_tokens=80, retry_truncated=True)  # the job runs at 100 now
