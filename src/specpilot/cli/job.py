"""`specpilot job JOB.toml`: one command from a server spec and prompts to an exported dataset."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from specpilot.cli.output import Human, Output, json_option
from specpilot.errors import EXIT_FAILED, EXIT_OK, DiskFull, Interrupted, JobFailed, SpecpilotError

if TYPE_CHECKING:
    from specpilot.job.lock import JobLock
    from specpilot.job.pipeline import JobResult

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
  min_clean_yield = 80          # percent clean, else the job stops early (0: off)
  [job.sampling]
  max_tokens = 4096             # or "auto" (from the bench, within the context)
  temperature = 0.6
  [job.bench]                   # optional: measure variants first, start the winner
  sample = 64
  variants = "plain,NEXTN:2"

Run the same command again to resume: finished stages are not run again.
Stopped by the yield guard (answers cut at max_tokens): rerun with the larger
--max-tokens it names and --retry-truncated.
Exit: 0 done, 1 a stage failed or the dataset is under its floor, 2 bad input,
130 Ctrl-C, SIGTERM or SIGHUP (what the job started is stopped)."""


#: the fix of an interrupted job under --json
RESUME = "run the same command again"


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
@click.option(
    "--max-tokens", type=click.IntRange(1), default=None, help="Override [job.sampling] max_tokens."
)
@click.option(
    "--retry-truncated",
    is_flag=True,
    help="Send the rows cut at the job's old max_tokens again (each once), at the larger one "
    "given now (--max-tokens or the job file).",
)
@json_option("Stages on stderr; one JSON object on stdout.")
def job(
    job_path: Path,
    output: Path | None,
    prompts: Path | None,
    max_restarts: int | None,
    keep_servers: bool | None,
    restart_from: str | None,
    max_tokens: int | None,
    retry_truncated: bool,
    out: Output,
) -> None:
    """Run a whole job: check -> plan -> bench -> up -> generate -> export -> down.

    Each stage records in OUTPUT/job.json what it decided and why, and the GPU-hours
    it held. While generating, every server the job started is watched: one that dies
    is restarted through the same verified start (after an out-of-memory death with
    the flag that bounds it lowered), its rows go back to the queue. At the end what
    the job started is stopped unless keep_servers.
    """
    from specpilot.cli.loop import run
    from specpilot.job.pipeline import begin, hold_folder, prepare, run_job, stop_short
    from specpilot.job.spec import load_job
    from specpilot.launch.shield import ending_signals

    overrides = {
        # a flag's path is the user's, relative to where they are: made absolute here
        "output": str(output.resolve()) if output is not None else None,
        "prompts": str(prompts.resolve()) if prompts is not None else None,
        "max_restarts": max_restarts,
        "keep_servers": keep_servers,
        "max_tokens": max_tokens,
        "retry_truncated": retry_truncated or None,
    }
    spec = load_job(job_path, overrides)
    lock: JobLock | None = None
    # SIGTERM and SIGHUP end it as Ctrl-C does (a second one cannot cut the stop short), from
    # the prompts' first read on (minutes for millions of rows)
    with ending_signals():
        try:
            try:
                lock = hold_folder(spec)
                record = prepare(spec, restart_from)
                lock = begin(spec, record, lock)
            except KeyboardInterrupt:
                early = Interrupted("interrupted before the job started anything; the same command starts it")
                out.fail(early, RESUME, output=str(spec.output))
            try:
                # the stages' lines go to stderr in both forms: for a person they are the story
                result = run(run_job(spec, record, out.note))
            except BaseException as err:
                # whatever stopped it, nothing it started is left running (unless keep_servers)
                left = run(stop_short(spec, record, out.note))
                _fail(out, err, left, str(spec.output))
        finally:
            if lock is not None:
                lock.release()
    out.show(_JobShown(result))
    if result.exit_code != EXIT_OK:
        sys.exit(result.exit_code)


def _fail(out: Output, err: BaseException, left: list[str], output: str) -> NoReturn:
    """How a job that stopped short ends: what is left running first, then why it stopped."""
    if left:
        out.fail(JobFailed(f"{'; '.join(left)} (stopping what the job started)"), output=output)
    if isinstance(err, KeyboardInterrupt):
        out.fail(Interrupted("interrupted; the same command resumes the job"), RESUME, output=output)
    if isinstance(err, DiskFull):  # no input was wrong: the stage failed, as the exit codes say
        err.exit_code = EXIT_FAILED
    if isinstance(err, SpecpilotError):
        out.fail(err, output=output)
    raise err


@dataclass(frozen=True)
class _JobShown:
    """How the job ended and the GPU-hours each stage held; for a person on stderr, after the stages."""

    result: JobResult

    def to_json(self) -> dict[str, Any]:
        return self.result.to_json()

    def human(self, out: Human) -> None:
        from specpilot.job.cost import used_lines, yield_lines

        result = self.result
        out.line(result.message if result.exit_code == EXIT_OK else f"error: {result.message}", err=True)
        for line in yield_lines(result.record):
            out.line(line, err=True)
        out.line("GPU-hours used, per stage:", err=True)
        for line in used_lines(result.record):
            out.line(line, err=True)
