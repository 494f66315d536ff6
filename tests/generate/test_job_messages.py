"""What `generate` says: a resumed job how many rows were already done, a --limit job that it
did what was asked (exit 0) and how to do the rest."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from specpilot.generate.dispatch import dispatcher as dispatch
from specpilot.generate.dispatch.endpoints import Endpoint
from specpilot.generate.job import JobConfig
from specpilot.generate.sampling import Sampling
from tests.fakeengines.standin import StandIn
from tests.fixtures.jobs import run_generate
from tests.generate.conftest import prompt_rows, write_jsonl


def config(tmp_path: Path, server: StandIn, said: list[str], limit: int | None = None) -> JobConfig:
    return JobConfig(
        input_path=write_jsonl(tmp_path / "in.jsonl", prompt_rows(10)),
        output_dir=tmp_path / "out",
        endpoints=[Endpoint(base_url=server.url)],
        model="m",
        sampling=Sampling(True),
        limit=limit,
        show_progress=False,
        notify=said.append,
    )


def test_limit_then_resume(tmp_path: Path) -> None:
    server = StandIn().start()
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


def test_a_server_that_never_answered_gives_up_before_give_up_after_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dispatch, "NEVER_ANSWERED_GIVE_UP_S", 0.5)  # (60 s in use)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"  # bound, never listening: refused
        job = JobConfig(
            input_path=write_jsonl(tmp_path / "in.jsonl", prompt_rows(3)),
            output_dir=tmp_path / "out",
            endpoints=[Endpoint(base_url=closed)],
            model="m",
            sampling=Sampling(True),
            give_up_after_s=3600.0,
            probe_cap_s=0.2,
            show_progress=False,
        )
        outcome = run_generate(job)
    assert outcome.exit_code == 1
    assert outcome.message == (
        "no server has answered since the job started (0.5 s); check the --server / --run addresses "
        "and that the servers are up"
    )
