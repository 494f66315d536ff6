"""Bad job files and job folders: one line naming the field and the fix, exit 2, nothing
started and nothing in the job folder changed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from specpilot.cli import cli
from tests.job.conftest import JobFactory


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def snapshot(folder: Path) -> dict[str, bytes]:
    """The folder's files; the job lock's holder line (who holds it now) is no data of the job."""
    if not folder.exists():
        return {}
    files = (p for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".job.lock")
    return {str(p.relative_to(folder)): p.read_bytes() for p in files}


def refused(job: Path, *flags: str) -> str:
    out = job.parent / "out"
    before = snapshot(out)
    existed = out.exists()
    result = run("job", str(job), *flags)
    assert result.exit_code == 2, result.output
    assert snapshot(out) == before and out.exists() == existed
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    return lines[0]


def server_path(job: Path) -> str:
    return next(line.split('"')[1] for line in job.read_text().splitlines() if line.startswith("server = "))


def rewrite(job: Path, old: str, new: str) -> None:
    text = job.read_text()
    assert old in text
    job.write_text(text.replace(old, new))


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ('prompts = "prompts.jsonl"', 'prompts = "missing.jsonl"', "[job] prompts"),
        ('export = ["specforge"]', 'export = ["csv"]', "[job] export"),
        ('output = "out"', 'output = "out"\nfleet = "fleet.toml"', "[job] server"),
        ('output = "out"', 'output = "out"\ncolour = "red"', "[job] colour"),
        ("max_tokens = 16", 'max_tokens = "many"', "[job.sampling] max_tokens"),
    ],
)
def test_a_bad_job_file_names_the_field(
    make_job: JobFactory, run_home: Path, old: str, new: str, field: str
) -> None:
    job = make_job()
    rewrite(job, old, new)
    assert field in refused(job)
    assert not (run_home.parent / "state" / "runs").exists()  # nothing started


def test_a_missing_server_spec(make_job: JobFactory, run_home: Path) -> None:
    job = make_job()
    text = job.read_text()
    server = next(line for line in text.splitlines() if line.startswith("server = "))
    rewrite(job, server, 'server = "gone.toml"')
    line = refused(job)
    assert "[job] server" in line and "gone.toml does not exist" in line


def test_a_bench_section_with_nothing_to_compare(make_job: JobFactory, run_home: Path) -> None:
    job = make_job(extra="[job.bench]\nsample = 4\n")
    line = refused(job)
    assert "[job.bench]" in line and "nothing to compare" in line


def test_a_folder_holding_another_jobs_ledger(make_job: JobFactory, run_home: Path) -> None:
    job = make_job()
    out = job.parent / "out"
    out.mkdir()
    (out / "ledger.sqlite").write_bytes(b"a generate job's ledger")
    line = refused(job)
    assert "[job] output" in line and "did not begin" in line


def test_a_folder_of_another_job_file(make_job: JobFactory, run_home: Path) -> None:
    job = make_job()
    out = job.parent / "out"
    out.mkdir()
    (out / "job.json").write_text(json.dumps({"job_file": "/elsewhere/job.toml"}))
    assert "belongs to the job /elsewhere/job.toml" in refused(job)


def test_changed_prompts_or_spec_after_the_job_ran(make_job: JobFactory, run_home: Path) -> None:
    job = make_job(rows=5)
    assert run("job", str(job)).exit_code == 0
    prompts = job.parent / "prompts.jsonl"
    original = prompts.read_text()
    prompts.write_text(original + json.dumps({"id": "new", "prompt": "another"}) + "\n")
    line = refused(job)
    assert "[job] prompts" in line and "new [job] output" in line
    prompts.write_text(original)
    spec = Path(server_path(job))
    spec.write_text(spec.read_text().replace("hang_timeout_s = 600.0", "hang_timeout_s = 601.0"))
    line = refused(job)
    assert "[job] server / fleet" in line and "--restart-from check" in line


def test_restart_from_accepts_the_changed_spec(make_job: JobFactory, run_home: Path) -> None:
    job = make_job(rows=5)
    assert run("job", str(job)).exit_code == 0
    spec = Path(server_path(job))
    spec.write_text(spec.read_text().replace("hang_timeout_s = 600.0", "hang_timeout_s = 601.0"))
    again = run("job", str(job), "--restart-from", "check")
    assert again.exit_code == 0, again.output
    data = json.loads((job.parent / "out" / "job.json").read_text())
    assert data["stages"]["check"]["attempts"] == 1 and data["stages"]["up"]["status"] == "done"


def started(folder: Path) -> list[int]:
    """The pids of every stand-in engine the job started (each start appends its own)."""
    starts = folder / "starts.txt"
    return [int(pid) for pid in starts.read_text().split()] if starts.exists() else []


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"", "has no usable rows"),
        (b"\x00\x9f\xff binary \x00\n", "line 1 is not valid JSON"),
        (b'{"id": "a", "prompt": "x"}\n{"id": "b", "prompt": "y"}\n{"id": "a", "prompt": "z"}\n', "repeat"),
    ],
    ids=["empty", "binary", "duplicate-id"],
)
def test_prompts_generate_would_refuse_are_refused_before_any_start(
    make_job: JobFactory, run_home: Path, tmp_path: Path, content: bytes, said: str
) -> None:
    """They were refused only by generate, after `up` had started the engine (left running).
    The line names the job file's key (a line that is not JSON said only `/path:1: ...`)."""
    job = make_job(standin={"starts_file": str(tmp_path / "starts.txt")})
    (job.parent / "prompts.jsonl").write_bytes(content)
    line = refused(job)
    assert said in line and line.startswith("error: [job] prompts: "), line
    assert started(tmp_path) == []


@pytest.mark.parametrize(
    "written",
    ["out/specforge.jsonl", "out/data/part-00000.jsonl", "out/errors.jsonl", "out/job.json"],
)
def test_prompts_among_the_files_the_job_writes_are_refused(
    make_job: JobFactory, run_home: Path, written: str
) -> None:
    """The job would overwrite or empty them: refused with the path, nothing written."""
    job = make_job()
    prompts = job.parent / written
    prompts.parent.mkdir(parents=True, exist_ok=True)
    prompts.write_bytes((job.parent / "prompts.jsonl").read_bytes())
    rewrite(job, 'prompts = "prompts.jsonl"', f'prompts = "{written}"')
    line = refused(job)
    assert "[job] prompts" in line and str(prompts) in line and "overwritten" in line, line
    assert not (run_home.parent / "state" / "runs").exists()


def test_prompts_hard_linked_to_a_part_the_job_writes_are_refused(
    make_job: JobFactory, run_home: Path
) -> None:
    """The same file under a second name: the job's generate emptied it as it repaired the part."""
    job = make_job()
    part = job.parent / "out" / "data" / "part-00000.jsonl"
    part.parent.mkdir(parents=True)
    os.link(job.parent / "prompts.jsonl", part)
    line = refused(job)
    assert f"[job] prompts: {job.parent / 'prompts.jsonl'} (a hard link of {part})" in line, line
    assert "overwritten" in line
    assert not (run_home.parent / "state" / "runs").exists()


def test_a_non_finite_sampling_value_is_refused_naming_the_key(make_job: JobFactory, run_home: Path) -> None:
    """TOML reads `inf`: it reached job.json as `Infinity`, which no strict JSON reader takes."""
    job = make_job(sampling={"max_tokens": 16})
    rewrite(job, "max_tokens = 16", "max_tokens = 16\ntemperature = inf")
    line = refused(job)
    assert "[job.sampling] temperature" in line and "finite" in line, line


def test_a_count_given_as_inf_asks_for_a_whole_number(make_job: JobFactory, run_home: Path) -> None:
    """The refusal read "must be a int, got inf (write a int)"."""
    job = make_job()
    rewrite(job, 'output = "out"', 'output = "out"\nconcurrency = inf')
    line = refused(job)
    assert "[job] concurrency: must be a whole number, got inf (write a whole number)" in line, line


def test_a_refusal_under_json_is_one_object_on_stdout(make_job: JobFactory, run_home: Path) -> None:
    job = make_job()
    rewrite(job, "max_tokens = 16", "max_tokens = 16\ntop_p = nan")
    result = run("job", str(job), "--json")
    assert result.exit_code == 2
    shown = json.loads(result.stdout)
    assert set(shown) == {"error", "fix", "exit"} and shown["exit"] == 2
    assert shown["error"].startswith("[job.sampling] top_p: nan is not a finite number")
    assert shown["error"].endswith("give a number from 0 to 1")  # the schema's words carry the fix
