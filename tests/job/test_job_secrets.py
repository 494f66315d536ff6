"""Nothing a job stores or prints holds a secret of its server spec, and the job sends its
server's API key on its own requests.

Once, an `--api-key` in the spec's args, a URL password in an engine arg and HF_TOKEN in its env
reached job.json (`argv_verified`) and the output; `logs NAME` printed the key the engine
logged; a key the server echoed into an answer landed in data/ and the export; and a job whose
spec started the engine with `--api-key` sent every request without it (all 401).
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.secrets import CONTENT_MARKER
from tests.job.conftest import JobFactory, output_ids

API_KEY = "sk-job-0123456789abcdef"
URL_PASSWORD = "pw-9f8e7d6c5b4a"
HF_TOKEN = "hf_AbCdEfGhIjKlMnOpQrSt"
SECRETS = (API_KEY, URL_PASSWORD, HF_TOKEN)


def test_the_job_sends_its_key_and_no_secret_reaches_a_file_or_a_line(
    make_job: JobFactory, run_home: Path
) -> None:
    job = make_job(
        rows=6,
        args=["--api-key", API_KEY, "--tokenizer-path", f"https://hub:{URL_PASSWORD}@models.example/tok"],
        env={"HF_TOKEN": HF_TOKEN},
        standin={"echo_api_key": True},
        job={"export": ["specforge"], "keep_servers": True},
    )
    runner = CliRunner()
    try:
        result = runner.invoke(cli, ["job", str(job), "--json"], catch_exceptions=False)
        logs = runner.invoke(cli, ["logs", "jobsrv"], catch_exceptions=False)
    finally:
        runner.invoke(cli, ["down", "jobsrv"], catch_exceptions=False)
    assert result.exit_code == 0, result.output  # not one 401: the job sent the key
    out = job.parent / "out"
    assert sorted(output_ids(out)) == [f"q{i}" for i in range(6)]
    shown = result.output + logs.output
    stored = "".join(
        path.read_text(errors="replace")
        for path in out.rglob("*")
        if path.is_file() and path.suffix != ".sqlite"
    )
    for secret in SECRETS:
        assert secret not in shown, secret
        assert secret not in stored, secret
    assert "api_key=" in logs.output  # the engine's args line is there, its key masked
    # SGLang reads the key from argv only: the job says so as `up` does, its fix readable (unmasked)
    assert "warning: --api-key stays in the engine's argv" in result.output
    assert "the key under `api-key`, and pass --config FILE" in result.output
    evidence = json.loads((out / "job.json").read_text())["stages"]["up"]["evidence"]
    assert "--api-key" in evidence["argv_verified"]
    # the key the server echoed into every answer: replaced, counted and said
    assert CONTENT_MARKER in (out / "specforge.jsonl").read_text()
    assert f"6 secret values the servers echoed into answers were replaced by {CONTENT_MARKER!r}" in shown
