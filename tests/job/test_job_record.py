"""job.json is read through its shape and checked against the ledger and the parts: a record
edited by hand is one line naming the key, or corrected where the ledger says otherwise; a
job folder that cannot be written, a damaged ledger or part is one line naming the file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from specpilot.cli import cli
from specpilot.generate.ledger.store import Ledger, PartCommit
from tests.job.conftest import JobFactory, output_ids
from tests.job.test_job_bad_input import refused


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def finished_job(make_job: JobFactory, rows: int) -> tuple[Path, Path, dict[str, Any]]:
    """A job run to its end: (job file, job folder, its job.json)."""
    job = make_job(rows=rows)
    result = run("job", str(job))
    assert result.exit_code == 0, result.output
    out = job.parent / "out"
    return job, out, json.loads((out / "job.json").read_text())


def exported_ids(out: Path) -> list[str]:
    return [
        json.loads(line)["id"].split("#")[0] for line in (out / "specforge.jsonl").read_text().splitlines()
    ]


@pytest.mark.parametrize(
    ("record", "key"),
    [
        ([1, 2], "the record should be a valid dictionary"),
        ({"stages": []}, "stages should be a valid dictionary"),
        ({"stages": {"generate": "done"}}, "stages.generate should be a valid dictionary"),
        ({"stages": {"up": {"status": "finished"}}}, "stages.up.status should be 'pending'"),
        ({"stages": {"up": {"status": "done", "attempts": "two"}}}, "stages.up.attempts should be"),
        ({"inputs": {"prompts": "prompts.jsonl"}}, "inputs.prompts should be a valid dictionary"),
        # what a rerun reads back (the end summary, the floor, the waste): a crash before
        ({"yield": "x"}, "yield should be a valid dictionary"),
        ({"yield": {"clean": 3}}, "yield.rows_total is missing"),
        ({"yield_guard": 5}, "yield_guard should be a valid dictionary"),
        ({"stages": {"up": {"status": "done", "wall_s": None}}}, "stages.up.wall_s should be a valid number"),
        (
            {"stages": {"generate": {"status": "done", "evidence": {"completion_tokens": "x"}}}},
            "stages.generate.evidence.completion_tokens should be a valid integer",
        ),
        ({"restarts": [{"down_s": "x"}]}, "restarts.0.down_s should be a valid number"),
    ],
    ids=[
        "a-list",
        "stages-a-list",
        "a-stage-a-string",
        "an-unknown-status",
        "a-count-a-word",
        "inputs",
        "yield-a-string",
        "yield-lacking-counts",
        "guard-a-number",
        "a-null-time",
        "evidence-tokens-a-word",
        "a-restart-time-a-word",
    ],
)
def test_a_record_of_the_wrong_shape_is_one_line_naming_the_key(
    make_job: JobFactory, run_home: Path, record: Any, key: str
) -> None:
    job = make_job(rows=2)
    out = job.parent / "out"
    out.mkdir()
    data = {"job_file": str(job), **record} if isinstance(record, dict) else record
    (out / "job.json").write_text(json.dumps(data))
    line = refused(job)
    assert "job.json" in line and key in line, line
    assert "[job] output" in line and "(" in line  # and the fix
    if "status" in key:
        assert "pending runs the stage again" in line


def test_a_record_without_its_job_file_names_the_key(make_job: JobFactory, run_home: Path) -> None:
    """It said "belongs to the job None"."""
    job, out, data = finished_job(make_job, rows=2)
    del data["job_file"]
    (out / "job.json").write_text(json.dumps(data))
    line = refused(job)
    assert f"{out / 'job.json'}: job_file is missing" in line, line
    assert 'set "job_file" to the path of the job file that began this folder' in line


def test_a_record_saying_generate_is_done_is_not_believed_over_the_ledger(
    make_job: JobFactory, run_home: Path
) -> None:
    job, out, data = finished_job(make_job, rows=20)
    # the ledger as a job stopped after 5 of 20 rows leaves it: those 5 in the part, the rest pending
    part = out / "data" / "part-00000.jsonl"
    kept = part.read_bytes().splitlines(keepends=True)[:5]
    part.write_bytes(b"".join(kept))
    ledger = Ledger.in_dir(out)
    gone = [p for _, p in ledger.done_in_part(0).items() if p >= 5]
    ledger.requeue_lost(gone, PartCommit(0, len(b"".join(kept)), 5))
    ledger.close()
    assert len(gone) == 15
    (out / "specforge.jsonl").write_text("")  # its export, as it was then
    # job.json edited by hand to say every stage finished (as it did above)
    result = run("job", str(job))
    assert result.exit_code == 0, result.output
    assert "says generate is done, but its ledger has 5 of 20 rows done: the ledger wins" in result.output
    assert sorted(output_ids(out)) == sorted(f"q{i}" for i in range(20))
    assert sorted(exported_ids(out)) == sorted(f"q{i}" for i in range(20))
    stages = json.loads((out / "job.json").read_text())["stages"]
    assert stages["generate"]["attempts"] == data["stages"]["generate"]["attempts"] + 1
    assert stages["generate"]["evidence"]["rows_done"] == 20


def test_a_rerun_after_a_part_was_deleted_generates_its_rows_again(
    make_job: JobFactory, run_home: Path
) -> None:
    job, out, _ = finished_job(make_job, rows=12)
    (out / "data" / "part-00000.jsonl").unlink()
    result = run("job", str(job))
    assert result.exit_code == 0, result.output
    assert "data/part-00000.jsonl lost rows since (deleted or cut short): the ledger wins" in result.output
    assert "12 rows are queued to be generated again" in result.output
    assert sorted(output_ids(out)) == sorted(f"q{i}" for i in range(12))
    assert sorted(exported_ids(out)) == sorted(f"q{i}" for i in range(12))


def test_a_record_without_its_inputs_reports_no_change(make_job: JobFactory, run_home: Path) -> None:
    job, out, data = finished_job(make_job, rows=3)
    del data["inputs"]
    (out / "job.json").write_text(json.dumps(data))
    result = run("job", str(job))
    assert result.exit_code == 0, result.output
    assert "changed since" not in result.output
    assert "lacks its record of the inputs (serving, bench, prompts, sampling, export)" in result.output
    assert "serving" in json.loads((out / "job.json").read_text())["inputs"]  # hashed again


def test_a_ledger_replaced_by_garbage_is_one_line_naming_it(make_job: JobFactory, run_home: Path) -> None:
    job, out, _ = finished_job(make_job, rows=3)
    for extra in ("ledger.sqlite-wal", "ledger.sqlite-shm"):
        (out / extra).unlink(missing_ok=True)
    (out / "ledger.sqlite").write_bytes(b"not a database at all\n" * 100)
    line = refused(job)
    assert f"{out / 'ledger.sqlite'} is damaged" in line and f"specpilot verify {out}" in line


def test_a_part_replaced_by_a_directory_is_one_line_naming_it(make_job: JobFactory, run_home: Path) -> None:
    job, out, _ = finished_job(make_job, rows=3)
    part = out / "data" / "part-00000.jsonl"
    part.unlink()
    part.mkdir()
    line = refused(job)
    assert f"{part} is a directory" in line and f"specpilot verify {out}" in line


def test_the_parts_folder_replaced_by_a_file_is_one_line_naming_it(
    make_job: JobFactory, run_home: Path
) -> None:
    """The server was started first, then generate stopped on "File exists" (fix: permissions)."""
    job, out, _ = finished_job(make_job, rows=3)
    shutil.rmtree(out / "data")
    (out / "data").write_text("not a folder\n")
    line = refused(job)
    assert f"{out / 'data'} is a file, where the job keeps the parts of its rows" in line, line
    assert f"specpilot verify {out}" in line


def _mount(args: list[str]) -> None:
    result = subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip()})")


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A small tmpfs of the test's own (what it does to it stays there)."""
    where = tmp_path / "disk"
    where.mkdir()
    _mount(["-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)])
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True, timeout=30)


def test_a_read_only_job_folder_is_refused_before_the_start(
    make_job: JobFactory, run_home: Path, disk: Path
) -> None:
    job = make_job(rows=3)
    _mount(["-o", "remount,ro", str(disk)])
    result = run("job", str(job), "--output", str(disk / "out"))
    assert result.exit_code == 2, result.output
    assert f"cannot write {disk / 'out'} (Read-only file system)" in result.output
    assert "specpilot verify" in result.output and "unexpected" not in result.output
    assert not (run_home.parent / "state" / "runs").exists()  # nothing started


def test_a_job_folder_on_a_full_disk_is_refused_before_the_start(
    make_job: JobFactory, run_home: Path, disk: Path
) -> None:
    job = make_job(rows=3)
    filler = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
    with pytest.raises(OSError, match="No space left"):
        while True:
            os.write(filler, b"\0" * 4096)
    os.close(filler)
    result = run("job", str(job), "--output", str(disk / "out"))
    assert result.exit_code == 2, result.output
    # the first file the job writes there: the folder's lock
    assert f"the disk holding {disk / 'out' / '.job.lock'} is full" in result.output
    assert "specpilot verify" in result.output and "unexpected" not in result.output
    assert not (run_home.parent / "state" / "runs").exists()  # nothing started
