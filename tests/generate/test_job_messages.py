"""What `generate` says: a resumed job how many rows were already done, a --limit job that it
did what was asked (exit 0) and how to do the rest."""

from __future__ import annotations

from pathlib import Path

from specpilot.generate.endpoints import Endpoint
from specpilot.generate.job import JobConfig, run_generate
from tests.generate.conftest import prompt_rows, write_jsonl
from tests.generate.fake_server import FakeServer


def config(tmp_path: Path, server: FakeServer, said: list[str], limit: int | None = None) -> JobConfig:
    return JobConfig(
        input_path=write_jsonl(tmp_path / "in.jsonl", prompt_rows(10)),
        output_dir=tmp_path / "out",
        endpoints=[Endpoint(base_url=server.url)],
        model="m",
        thinking=True,
        limit=limit,
        show_progress=False,
        notify=said.append,
    )


def test_limit_then_resume(tmp_path: Path) -> None:
    server = FakeServer().start()
    said: list[str] = []
    try:
        limited = run_generate(config(tmp_path, server, said, limit=4))
        assert said == []  # a new job resumes nothing
        resumed = run_generate(config(tmp_path, server, said))
    finally:
        server.close()
    assert (limited.exit_code, limited.summary.done) == (0, 4)
    assert limited.message == (
        "the first 4 input rows are done (--limit 4); 6 more are in the input: "
        "the same command without --limit does them"
    )
    assert said == [f"resuming {tmp_path / 'out'}: 4 of 10 rows already done; 6 to send now"]
    assert (resumed.exit_code, resumed.message) == (0, "all 10 rows done")
