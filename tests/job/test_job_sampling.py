"""The job file's `[job.sampling]` and generate's flags are one schema: a value one refuses the
other refuses with the same words (each naming its own spelling of the key), exit 2. Refusals
of the commands a job runs name the job file's keys; its export states the template as
`specpilot export` does."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.job.spec import load_job
from tests.job.conftest import JobFactory
from tests.job.test_job_bad_input import refused, rewrite
from tests.job.test_job_e2e import record, run

BAD_VALUES = [
    # key, as TOML writes it, as typed after the flag, the message both give
    ("top_p", "5", "5", "must be a number from 0 to 1, got 5"),
    ("temperature", "-1", "-1", "must be a number of at least 0, got -1"),
    ("presence_penalty", "99", "99", "must be a number from -2 to 2, got 99"),
    ("frequency_penalty", "-2.5", "-2.5", "must be a number from -2 to 2, got -2.5"),
    ("repetition_penalty", "0", "0", "must be a number above 0, got 0"),
    ("max_tokens", "-5", "-5", "must be a whole number of at least 1, got -5"),
    ("max_tokens", "0", "0", "must be a whole number of at least 1, got 0"),
    ("max_tokens", "1.5", "1.5", "must be a whole number of at least 1, got 1.5"),
    ("top_k", "2.5", "2.5", "must be a whole number, got 2.5"),
    ("min_p", '"many"', "many", "must be a number from 0 to 1, got 'many'"),
    ("seed", '"x"', "x", "must be a whole number, got 'x'"),
    ("temperature", "nan", "nan", "nan is not a finite number; give a number of at least 0"),
    ("top_p", "inf", "inf", "inf is not a finite number; give a number from 0 to 1"),
]


def with_sampling(job: Path, key: str, toml: str) -> None:
    """`key = toml` in the job's [job.sampling] (its max_tokens = 16 replaced when that is the key)."""
    rewrite(
        job,
        "max_tokens = 16",
        f"{key} = {toml}" if key == "max_tokens" else f"max_tokens = 16\n{key} = {toml}",
    )


@pytest.mark.parametrize(
    ("key", "toml", "typed", "message"), BAD_VALUES, ids=[f"{c[0]}={c[1]}" for c in BAD_VALUES]
)
def test_the_job_file_and_the_flags_refuse_a_value_alike(
    make_job: JobFactory, run_home: Path, tmp_path: Path, key: str, toml: str, typed: str, message: str
) -> None:
    job = make_job()
    with_sampling(job, key, toml)
    assert refused(job) == f"error: [job.sampling] {key}: {message}"
    flag = "--" + key.replace("_", "-")
    argv = ["generate", "--input", str(job.parent / "prompts.jsonl"), "--output", str(tmp_path / "gen"),
            "--server", "http://127.0.0.1:9", flag, typed]  # fmt: skip
    flagged = CliRunner().invoke(cli, argv)
    assert flagged.exit_code == 2
    assert flagged.output.strip().splitlines()[-1] == f"Error: Invalid value for '{flag}': {message}"
    assert not (tmp_path / "gen").exists()


@pytest.mark.parametrize(
    ("key", "toml", "message"),
    [
        ("stop", "[1, 2]", "must be a list of strings, got [1, 2]"),
        ("stop", '"###"', "must be a list of strings, got '###'"),
        ("thinking", '"yes"', "must be true or false, got 'yes'"),
        ("max_tokens", '"AUTO"', "must be a whole number of at least 1, got 'AUTO'"),
    ],
)
def test_values_only_a_job_file_can_hold_are_refused(
    make_job: JobFactory, run_home: Path, key: str, toml: str, message: str
) -> None:
    job = make_job()
    with_sampling(job, key, toml)
    assert refused(job) == f"error: [job.sampling] {key}: {message}"


def test_max_tokens_auto_is_a_job_files_own(make_job: JobFactory, run_home: Path) -> None:
    job = make_job()
    with_sampling(job, "max_tokens", '"auto"')
    loaded = load_job(job)
    assert loaded.max_tokens_auto and loaded.sampling.max_tokens is None
    assert loaded.options_json()["sampling"]["max_tokens"] == "auto"


def test_a_refusal_of_the_prompts_names_the_job_files_key(make_job: JobFactory, run_home: Path) -> None:
    job = make_job()
    (job.parent / "prompts.txt").write_text('{"id": "a", "prompt": "hi"}\n')
    rewrite(job, 'prompts = "prompts.jsonl"', 'prompts = "prompts.txt"')
    line = refused(job)
    assert line.startswith("error: [job] prompts: ") and "unknown prompt file format '.txt'" in line
    assert "--input" not in line


def test_the_jobs_export_states_the_template_as_export_does(make_job: JobFactory, run_home: Path) -> None:
    """The stand-in serves `fake-model`, for which no SpecForge template is known: `export` warns,
    and so does the job's export (it said nothing)."""
    job = make_job(rows=3)
    result = run("job", str(job))
    assert result.exit_code == 0, result.output
    warning = "no known SpecForge template for model 'fake-model'"
    assert f"export: warning: {warning}" in result.output
    specforge = record(job)["stages"]["export"]["evidence"]["formats"]["specforge"]
    assert specforge["chat_template"] is None and any(warning in w for w in specforge["warnings"])
    exported = CliRunner().invoke(
        cli, ["export", str(job.parent / "out"), "--format", "specforge", "--overwrite"]
    )
    assert exported.exit_code == 0 and f"warning: {warning}" in exported.output
