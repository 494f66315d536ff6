"""`specpilot generate`, `specpilot report` and `specpilot export`: drafter data generation."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import click
from rich.console import Console

from specpilot.cli.params import FiniteFloat, NonEmptyPath
from specpilot.errors import EXIT_OK, UserError

EXAMPLE_GENERATE = """\b
Example:
  specpilot generate --input prompts.jsonl --output out/ --run qwen36 \\
      --thinking --max-tokens 16384 --temperature 0.6 --concurrency 64
  specpilot generate --input prompts.parquet --output out/ \\
      --server http://10.0.0.5:30000 --server http://10.0.0.6:30000
Run the same command again to resume; `specpilot report out/` shows progress.
An API key, if the servers need one, is read from $SPECPILOT_API_KEY."""


@click.command("generate", epilog=EXAMPLE_GENERATE)
@click.option(
    "--input",
    "input_path",
    required=True,
    type=NonEmptyPath(path_type=Path),
    help="Prompts: .jsonl, .parquet, or a datasets save_to_disk directory.",
)
@click.option(
    "--output",
    "output_dir",
    required=True,
    type=NonEmptyPath(path_type=Path),
    help="Job directory: ledger, data/part-*.jsonl, errors.jsonl, manifest.json.",
)
@click.option("--server", "servers", multiple=True, help="OpenAI-compatible base URL (repeatable).")
@click.option("--run", "runs", multiple=True, help="Name of a run started by `specpilot up`.")
@click.option("--model", default=None, help="Model name (default: the run's or /v1/models').")
@click.option(
    "--concurrency",
    default=64,
    show_default=True,
    type=click.IntRange(1),
    help="Requests in flight per server.",
)
@click.option(
    "--max-tokens",
    type=click.IntRange(1),
    default=None,
    help="Sampling parameters are sent only when given (else the server's defaults).",
)
@click.option("--temperature", type=FiniteFloat(0), default=None)
@click.option("--top-p", type=FiniteFloat(0, 1), default=None)
@click.option("--top-k", type=int, default=None)
@click.option(
    "--thinking/--no-thinking",
    default=True,
    show_default=True,
    help="chat_template_kwargs.enable_thinking; recorded in every row.",
)
@click.option("--limit", type=click.IntRange(1), default=None, help="Only the first N input rows.")
@click.option("--dedupe", is_flag=True, help="Keep the first row of each repeated id.")
@click.option("--retry-failed", is_flag=True, help="Send rows that failed in earlier runs again.")
@click.option(
    "--max-attempts",
    default=6,
    show_default=True,
    type=click.IntRange(1),
    help="Requests per row before it fails (429/5xx/timeouts are retried).",
)
@click.option(
    "--retry-base-s",
    default=1.0,
    show_default=True,
    type=FiniteFloat(0),
    help="First retry delay; doubles per attempt, jittered, capped at 60 s.",
)
@click.option(
    "--request-timeout-s",
    default=1800.0,
    show_default=True,
    type=FiniteFloat(0.1),
    help="Longest one request may take (long reasoning traces need minutes).",
)
@click.option(
    "--give-up-after-s",
    default=3600.0,
    show_default=True,
    type=FiniteFloat(0),
    help="Stop (exit 1) when every server has been down this long.",
)
@click.option(
    "--flush-interval-s",
    default=0.5,
    show_default=True,
    type=FiniteFloat(0.001),
    help="How often finished rows are fsynced and committed to the ledger.",
)
@click.option(
    "--rows-per-part",
    default=100_000,
    show_default=True,
    type=click.IntRange(1),
    help="Rows per output shard data/part-NNNNN.jsonl.",
)
@click.option(
    "--progress-interval-s",
    default=30.0,
    show_default=True,
    type=FiniteFloat(0),
    help="Seconds between summary lines when stderr is not a terminal.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the final summary as JSON.")
def generate(
    input_path: Path,
    output_dir: Path,
    servers: tuple[str, ...],
    runs: tuple[str, ...],
    model: str | None,
    concurrency: int,
    max_tokens: int | None,
    temperature: float | None,
    top_p: float | None,
    top_k: int | None,
    thinking: bool,
    limit: int | None,
    dedupe: bool,
    retry_failed: bool,
    max_attempts: int,
    retry_base_s: float,
    request_timeout_s: float,
    give_up_after_s: float,
    flush_interval_s: float,
    rows_per_part: int,
    progress_interval_s: float,
    as_json: bool,
) -> None:
    """Generate answers (with reasoning) for every prompt, exactly once, resumably."""
    from specpilot.generate.endpoints import resolve_endpoints
    from specpilot.generate.job import JobConfig, run_generate
    from specpilot.generate.report import render_summary

    config = JobConfig(
        input_path=input_path,
        output_dir=output_dir,
        endpoints=resolve_endpoints(servers, runs),
        model=model,
        thinking=thinking,
        concurrency=concurrency,
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        limit=limit,
        dedupe=dedupe,
        retry_failed=retry_failed,
        max_attempts=max_attempts,
        retry_base_s=retry_base_s,
        request_timeout_s=request_timeout_s,
        give_up_after_s=give_up_after_s,
        flush_interval_s=flush_interval_s,
        rows_per_part=rows_per_part,
        progress_interval_s=progress_interval_s,
    )
    outcome = run_generate(config)
    if as_json:
        click.echo(
            json.dumps({**outcome.summary, "exit_code": outcome.exit_code, "message": outcome.message})
        )
    else:
        render_summary(outcome.summary, Console(file=sys.stderr))
        click.echo(outcome.message, err=True)
    if outcome.exit_code != EXIT_OK:
        sys.exit(outcome.exit_code)


@click.command("report", epilog="\b\nExample:\n  specpilot report out/ --json")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def report(directory: Path, as_json: bool) -> None:
    """Summary of a generate job from its ledger; safe while the job runs."""
    from specpilot.generate.report import open_for_report, render_summary, summarize

    ledger = open_for_report(directory)
    try:
        summary = summarize(ledger)
    except sqlite3.DatabaseError as err:
        raise UserError(
            f"the ledger in {directory} cannot be read ({err})",
            field="DIR",
            fix="restore the folder from a backup; the rows themselves are in its data/ folder",
        ) from None
    finally:
        ledger.close()
    if as_json:
        click.echo(json.dumps(summary))
    else:
        render_summary(summary, Console())


@click.command("export", epilog="\b\nExample:\n  specpilot export out/ --parquet")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--parquet", is_flag=True, help="Write Parquet shards (the only format so far).")
@click.option(
    "--to",
    "target",
    type=click.Path(path_type=Path),
    default=None,
    help="Where to write the shards (default DIR/parquet).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the files written as JSON.")
def export(directory: Path, parquet: bool, target: Path | None, as_json: bool) -> None:
    """Export the finished rows of a generate job (readable by datasets.load_dataset)."""
    from specpilot.generate.export import export_parquet

    if not parquet:
        raise UserError("no format chosen", field="--parquet", fix="pass --parquet")
    result = export_parquet(directory, target)
    if as_json:
        click.echo(json.dumps({"files": [str(f) for f in result.files], "rows": result.rows}))
    else:
        click.echo(
            f"wrote {result.rows} rows to {len(result.files)} Parquet shards in {result.files[0].parent}"
        )
