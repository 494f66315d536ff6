"""Committed parts carry a verified mark, so a start reads what a crash can touch, not every byte.

Once, every start read each committed part whole to check its rows: a resumed 900,000-row
job took 148 s and 2.6 GiB before its first request. Now a start checks sizes and mtimes
against the mark and re-reads only the newest part's last commit; `specpilot verify` reads
every byte, names each damaged row and queues it again.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.generate.dispatch.endpoints import Endpoint
from specpilot.generate.job import JobConfig
from specpilot.generate.sampling import Sampling
from tests.fakeengines.standin import StandIn, answer_for
from tests.fixtures.jobs import run_generate
from tests.generate.conftest import prompt_rows, read_output, write_jsonl

ROWS = 20


def _config(tmp_path: Path, server: StandIn, notes: list[str], **extra: Any) -> JobConfig:
    settings: dict[str, Any] = {"concurrency": 1, "show_progress": False, "rows_per_part": 5, **extra}
    path = write_jsonl(tmp_path / "in.jsonl", prompt_rows(ROWS))
    return JobConfig(
        path, tmp_path / "out", [Endpoint(server.url)], None, Sampling(True), notify=notes.append, **settings
    )


def _flip(part: Path, old: bytes, new: bytes, *, keep_mtime: bool) -> int:
    """Change `old` to `new` (same length) in `part`; the line number it was on."""
    stat = part.stat()
    data = part.read_bytes()
    assert data.count(old) == 1 and len(old) == len(new)
    part.write_bytes(data.replace(old, new))
    if keep_mtime:
        os.utime(part, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    return data[: data.index(old)].count(b"\n") + 1


def _answer_line(part: Path, index: int) -> tuple[str, bytes]:
    """The id of the `index`th row of `part` and a byte string of its answer that occurs once."""
    row = json.loads(part.read_text().splitlines()[index])
    answer = row["conversations"][-1]["content"].encode()
    return row["id"], answer


def _done(tmp_path: Path, server: StandIn) -> JobConfig:
    config = _config(tmp_path, server, [])
    assert run_generate(config).exit_code == 0
    return config


def test_a_start_trusts_a_part_whose_mark_holds_and_verify_reads_every_byte(
    tmp_path: Path, fake_server: StandIn
) -> None:
    config = _done(tmp_path, fake_server)
    part = config.output_dir / "data" / "part-00000.jsonl"  # an older part: closed, not the newest
    row_id, answer = _answer_line(part, 2)
    line = _flip(part, answer, answer[:-1] + b"#", keep_mtime=True)

    notes: list[str] = []
    sent = fake_server.counts.answered
    assert run_generate(_config(tmp_path, fake_server, notes)).exit_code == 0
    assert fake_server.counts.answered == sent  # size and mtime match the mark: not read

    verified = CliRunner().invoke(cli, ["verify", str(config.output_dir)])
    assert verified.exit_code == 1
    assert f"data/part-00000.jsonl line {line}: row {row_id} changed since it was written" in verified.stderr
    assert "1 rows queued again" in verified.stdout

    assert run_generate(_config(tmp_path, fake_server, notes)).exit_code == 0
    assert fake_server.counts.answered == sent + 1  # only the damaged row is made again
    rows = read_output(config.output_dir)
    assert sorted(r["id"] for r in rows) == sorted(f"q{i}" for i in range(ROWS))
    assert all(
        r["conversations"][-1]["content"] == answer_for(r["conversations"][-2]["content"])[0] for r in rows
    )
    again = CliRunner().invoke(cli, ["verify", str(config.output_dir), "--json"])
    assert again.exit_code == 0
    assert json.loads(again.stdout) == {
        "parts": 5,  # the row made again went to a new part
        "rows": ROWS,
        "requeued_rows": 0,
        "lost_parts": [],
        "damaged": [],
    }


def test_a_changed_byte_in_the_last_commit_is_found_at_start_even_with_its_mtime_kept(
    tmp_path: Path, fake_server: StandIn
) -> None:
    config = _done(tmp_path, fake_server)
    part = config.output_dir / "data" / "part-00003.jsonl"  # the newest part: its last commit is re-read
    row_id, answer = _answer_line(part, 4)
    line = _flip(part, answer, answer[:-1] + b"#", keep_mtime=True)
    notes: list[str] = []
    sent = fake_server.counts.answered
    assert run_generate(_config(tmp_path, fake_server, notes)).exit_code == 0
    assert fake_server.counts.answered == sent + 1
    assert f"data/part-00003.jsonl line {line}: row {row_id} changed since it was written" in "\n".join(notes)


def test_a_changed_byte_in_an_older_part_is_found_at_start_by_its_mtime(
    tmp_path: Path, fake_server: StandIn
) -> None:
    config = _done(tmp_path, fake_server)
    part = config.output_dir / "data" / "part-00001.jsonl"
    row_id, answer = _answer_line(part, 0)
    _flip(part, answer, answer[:-1] + b"#", keep_mtime=False)
    notes: list[str] = []
    sent = fake_server.counts.answered
    assert run_generate(_config(tmp_path, fake_server, notes)).exit_code == 0
    assert fake_server.counts.answered == sent + 1
    assert f"data/part-00001.jsonl line 1: row {row_id} changed" in "\n".join(notes)


def test_a_ledger_from_before_marks_is_read_once_then_marked(tmp_path: Path, fake_server: StandIn) -> None:
    config = _done(tmp_path, fake_server)
    with sqlite3.connect(config.output_dir / "ledger.sqlite") as db:
        db.execute("UPDATE parts SET crc = NULL, mtime_ns = NULL, tail_crc = NULL")
    part = config.output_dir / "data" / "part-00000.jsonl"
    _, answer = _answer_line(part, 1)
    _flip(part, answer, answer[:-1] + b"#", keep_mtime=True)  # no mark to hold: found all the same
    notes: list[str] = []
    sent = fake_server.counts.answered
    assert run_generate(_config(tmp_path, fake_server, notes)).exit_code == 0
    assert fake_server.counts.answered == sent + 1
    with sqlite3.connect(config.output_dir / "ledger.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM parts WHERE crc IS NULL OR mtime_ns IS NULL").fetchone() == (
            0,
        )


def test_verify_names_a_part_that_is_gone_and_a_folder_without_a_job(
    tmp_path: Path, fake_server: StandIn
) -> None:
    config = _done(tmp_path, fake_server)
    (config.output_dir / "data" / "part-00002.jsonl").unlink()
    verified = CliRunner().invoke(cli, ["verify", str(config.output_dir)])
    assert verified.exit_code == 1
    assert "data/part-00002.jsonl is missing or cut short" in verified.stderr
    assert verified.stderr.count("data/part-00002.jsonl: row q") == 5  # each lost row by name
    assert "5 rows queued again" in verified.stdout
    empty = CliRunner().invoke(cli, ["verify", str(tmp_path / "nothing")])
    assert empty.exit_code == 2
    assert "holds no generate job" in empty.stderr


def test_a_resume_reads_the_input_from_the_mark_before_its_first_pending_row(
    tmp_path: Path, fake_server: StandIn, monkeypatch: Any
) -> None:
    # once, a resume scanned every finished row's line of the input to reach the pending ones
    from specpilot.generate.job import Job
    from specpilot.generate.rows import inputs

    monkeypatch.setattr(inputs, "MARK_EVERY_ROWS", 4)
    assert run_generate(_config(tmp_path, fake_server, [], limit=10)).exit_code == 0
    job = Job(_config(tmp_path, fake_server, []))
    try:
        job.prepare("fake-model")
        start = job._input_start()
        assert start is not None and (start.position, start.line_number) == (8, 9)
        read = [row.row_id for row in inputs.iter_rows(job.source, job.pending, start=start)]
    finally:
        job.close()
    assert read == [f"q{i}" for i in range(10, ROWS)]
    assert run_generate(_config(tmp_path, fake_server, [])).exit_code == 0
    assert sorted(r["id"] for r in read_output(tmp_path / "out")) == sorted(f"q{i}" for i in range(ROWS))


def test_an_input_changed_since_the_job_began_is_refused_naming_its_lines(
    tmp_path: Path, fake_server: StandIn, monkeypatch: Any
) -> None:
    import pytest

    from specpilot.errors import UserError
    from specpilot.generate.rows import inputs

    monkeypatch.setattr(inputs, "MARK_EVERY_ROWS", 4)
    config = _config(tmp_path, fake_server, [], limit=10)
    assert run_generate(config).exit_code == 0
    lines = config.input_path.read_text().splitlines(keepends=True)
    lines[13] = lines[13].replace('"q 13"', '"q 99"')  # line 14
    stat = config.input_path.stat()
    config.input_path.write_text("".join(lines))
    os.utime(config.input_path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # an edit a second later
    with pytest.raises(
        UserError, match=r"in\.jsonl changed since this job started \(first within lines 13-16\)"
    ):
        run_generate(dataclasses.replace(config, limit=None))  # the same command, the input as it is now


def test_a_part_cut_mid_line_is_found_at_start_naming_the_rows_it_lost(
    tmp_path: Path, fake_server: StandIn
) -> None:
    config = _done(tmp_path, fake_server)
    part = config.output_dir / "data" / "part-00001.jsonl"
    lines = part.read_bytes().splitlines(keepends=True)
    lost = [json.loads(line)["id"] for line in lines[3:]]
    part.write_bytes(b"".join(lines[:3]) + lines[3][:10])  # three whole rows, then a torn one
    notes: list[str] = []
    sent = fake_server.counts.answered
    assert run_generate(_config(tmp_path, fake_server, notes)).exit_code == 0
    assert fake_server.counts.answered == sent + len(lost)
    said = "\n".join(notes)
    assert "part-00001.jsonl in" in said and "lost rows since the last run" in said
    assert all(f"data/part-00001.jsonl: row {row_id} is missing" in said for row_id in lost)
