"""`specpilot job JOB.toml`: one command from a server spec and prompts to an exported dataset."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import click

from specpilot.errors import EXIT_OK, SpecpilotError

EXAMPLE = """\b
Example:
  specpilot job job.toml
  specpilot job job.toml --output /data/run2 --max-restarts 5 --json
  specpilot job job.toml --restart-from export

\b
job.toml:
  [job]
  server = "server.toml"        # or fleet = "fleet.toml"
  prompts = "prompts.jsonl"
  output = "out"                # the job folder: job.json, ledger, data/, exports
  export = ["specforge", "parquet"]
  keep_servers = false          # stop what the job started at the end
  max_restarts = 3              # per engine that dies while the job runs
  [job.sampling]
  max_tokens = 4096
  temperature = 0.6
  [job.bench]                   # optional: measure variants first, start the winner
  sample = 64
  variants = "plain,NEXTN:2"

Run the same command again to resume: finished stages are not run again.
Exit: 0 done, 1 a stage failed (run the same command to resume), 2 bad input."""


@click.command("job", epilog=EXAMPLE)
@click.argument("job_path", metavar="JOB.toml", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--output", type=click.Path(path_type=Path), default=None, help="Override [job] output.")
@click.option("--prompts", type=click.Path(path_type=Path), default=None, help="Override [job] prompts.")
@click.option("--max-restarts", type=click.IntRange(0), default=None, help="Override [job] max_restarts.")
@click.option("--keep-servers/--stop-servers", default=None, help="Override [job] keep_servers for this run.")
@click.option(
    "--restart-from",
    type=click.Choice(["check", "plan", "bench", "up", "generate", "export", "down"]),
    default=None,
    help="Run this stage and every later one again (after a changed input).",
)
@click.option("--json", "as_json", is_flag=True, help="Stages on stderr; one JSON object on stdout.")
def job(
    job_path: Path,
    output: Path | None,
    prompts: Path | None,
    max_restarts: int | None,
    keep_servers: bool | None,
    restart_from: str | None,
    as_json: bool,
) -> None:
    """Run a whole job: check -> plan -> bench -> up -> generate -> export -> down.

    Each stage records in OUTPUT/job.json what it decided and why, and the GPU-hours
    it held. While generating, every server the job started is watched: one that dies
    is restarted through the same verified start (after an out-of-memory death with
    the flag that bounds it lowered), its rows go back to the queue. At the end what
    the job started is stopped unless keep_servers.
    """
    from specpilot.job.cost import used_lines
    from specpilot.job.pipeline import begin, prepare, run_job
    from specpilot.job.spec import load_job

    def say(line: str) -> None:
        click.echo(line, err=True)

    overrides = {
        # a flag's path is the user's, relative to where they are: made absolute here
        "output": str(output.resolve()) if output is not None else None,
        "prompts": str(prompts.resolve()) if prompts is not None else None,
        "max_restarts": max_restarts,
        "keep_servers": keep_servers,
    }
    spec = load_job(job_path, overrides)
    record = prepare(spec, restart_from)
    begin(spec, record)
    try:
        result = asyncio.run(run_job(spec, record, say))
    except SpecpilotError as err:
        if not as_json:
            raise
        click.echo(json.dumps({"exit_code": err.exit_code, "message": str(err), "output": str(spec.output)}))
        sys.exit(err.exit_code)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        say(result.message if result.exit_code == EXIT_OK else f"error: {result.message}")
        say("GPU-hours used, per stage:")
        for line in used_lines(record):
            say(line)
    if result.exit_code != EXIT_OK:
        sys.exit(result.exit_code)
