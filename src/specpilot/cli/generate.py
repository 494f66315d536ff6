"""`specpilot generate`, `specpilot report` and `specpilot export`: drafter data generation."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from specpilot.cli.output import Human, Output, json_option
from specpilot.cli.params import FiniteFloat, NonEmptyPath
from specpilot.cli.sampling import sampling_options
from specpilot.cli.view import serve_status_options
from specpilot.errors import EXIT_FAILED, EXIT_OK, Interrupted, UserError
from specpilot.export.formats import FORMATS, ExportFormat, format_help, format_named, names_with, target_help
from specpilot.generate.rows.inputs import ROW_SHAPES_HELP
from specpilot.generate.sampling import Sampling
from specpilot.generate.yields import DEFAULT_GUARD_MIN_ROWS, DEFAULT_MIN_CLEAN_YIELD_PCT, GUARD_LEAST_ROWS

if TYPE_CHECKING:
    from specpilot.export.run import ExportResult
    from specpilot.generate.job import Outcome
    from specpilot.generate.ledger.report import JobSummary
    from specpilot.projection import Projection


EXAMPLE_GENERATE = (
    """\b
Example:
  specpilot generate --input prompts.jsonl --output out/ --run qwen36 \\
      --thinking --max-tokens 16384 --temperature 0.6 --concurrency 64
  specpilot generate --input prompts.parquet --output out/ \\
      --server http://10.0.0.5:30000 --server http://10.0.0.6:30000
  specpilot generate --input prompts.jsonl --output out/ --fleet qwen36-fleet
Run the same command again to resume; `specpilot report out/` shows progress.
An API key, if the servers need one, is read from $SPECPILOT_API_KEY.

\b
Input rows (one JSON object per line; Parquet/datasets columns of the same names).
"id" is optional (a content hash is used without it). The target writes every
assistant turn (a given one only marks where an answer goes); --keep-given-turns keeps
them as context and generates only the last answer:
"""
    + ROW_SHAPES_HELP
)


@click.command("generate", epilog=EXAMPLE_GENERATE)
@click.option(
    "--input",
    "input_path",
    required=True,
    type=NonEmptyPath(path_type=Path),
    help="Prompts: .jsonl, .parquet, or a datasets save_to_disk directory (row shapes below).",
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
@click.option(
    "--router",
    "routers",
    multiple=True,
    help="An smg router's URL: it picks the worker; --concurrency is then per worker behind it.",
)
@click.option(
    "--fleet", "fleets", multiple=True, help="Name of a fleet started by `specpilot up FLEET.toml`."
)
@click.option("--model", default=None, help="Model name (default: the run's or /v1/models').")
@click.option(
    "--concurrency",
    default=64,
    show_default=True,
    type=click.IntRange(1),
    help="Requests in flight per server (per worker behind a --router or --fleet).",
)
@sampling_options(
    max_tokens_help="Sampling parameters are sent only when given (else the server's defaults).",
    thinking_help="chat_template_kwargs.enable_thinking; recorded in every row.",
    sampling_seed=True,
)
@click.option(
    "--keep-given-turns",
    is_flag=True,
    help="Keep the input's assistant turns as context and generate only the last answer "
    "(default: the target writes every assistant turn, as drafter training needs).",
)
@click.option("--limit", type=click.IntRange(1), default=None, help="Only the first N input rows.")
@click.option("--dedupe", is_flag=True, help="Keep the first row of each repeated id.")
@click.option(
    "--strict",
    "strict_rows",
    is_flag=True,
    help="Reject input rows with fields specpilot does not read (default: ignore them, counted in one line).",
)
@click.option("--retry-failed", is_flag=True, help="Send rows that failed in earlier runs again.")
@click.option(
    "--retry-truncated",
    is_flag=True,
    help="Send the rows cut off at the job's --max-tokens again (each once), at the larger "
    "--max-tokens given now; the rest of the job is unchanged.",
)
@click.option(
    "--min-clean-yield",
    "min_clean_yield_pct",
    default=DEFAULT_MIN_CLEAN_YIELD_PCT,
    show_default=True,
    type=float,
    help="Yield guard floor, a percent (0-100) of rows that must come back clean: a job projected "
    "under it (cut at --max-tokens, no reasoning, empty, repetitive) stops early with the fix. 0: off.",
)
@click.option(
    "--guard-min-rows",
    default=DEFAULT_GUARD_MIN_ROWS,
    show_default=True,
    type=int,
    help=f"Finished rows the yield guard waits for before judging (and 2% of the input; at least "
    f"{GUARD_LEAST_ROWS}).",
)
@click.option(
    "--max-attempts",
    default=6,
    show_default=True,
    type=click.IntRange(1),
    help="Requests per row before it fails (5xx/timeouts are retried; 429/503 back off without counting).",
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
    "--stall-after-s",
    default=None,
    type=FiniteFloat(0.1),
    help="A server with requests in flight and no token progress this long is stalled (a hung "
    "engine): its rows go back to the queue unspent and it is taken out (default: 4 x the p99 "
    "request time so far, at least 120 s).",
)
@click.option(
    "--give-up-after-s",
    default=3600.0,
    show_default=True,
    type=FiniteFloat(0),
    help="Stop (exit 1) when every server has been down this long (at most 60 s while none has "
    "ever answered: a wrong address, not an outage), or has answered every request 429/503 this long.",
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
@serve_status_options
@json_option("Print the final summary as JSON.")
def generate(
    input_path: Path,
    output_dir: Path,
    servers: tuple[str, ...],
    runs: tuple[str, ...],
    routers: tuple[str, ...],
    fleets: tuple[str, ...],
    model: str | None,
    concurrency: int,
    sampling: Sampling,
    keep_given_turns: bool,
    limit: int | None,
    dedupe: bool,
    strict_rows: bool,
    retry_failed: bool,
    retry_truncated: bool,
    min_clean_yield_pct: float,
    guard_min_rows: int,
    max_attempts: int,
    retry_base_s: float,
    request_timeout_s: float,
    stall_after_s: float | None,
    give_up_after_s: float,
    flush_interval_s: float,
    rows_per_part: int,
    progress_interval_s: float,
    serve_status: str | None,
    status_public: bool,
    status_hosts: tuple[str, ...],
    out: Output,
) -> None:
    """Generate answers (with reasoning) for every prompt, exactly once, resumably."""
    from specpilot.generate.dispatch.endpoints import resolve_endpoints
    from specpilot.generate.job import JobConfig, generate_in_loop
    from specpilot.generate.yields import YieldFloor, check_floor, check_min_rows

    floor = YieldFloor(
        check_floor(min_clean_yield_pct, "--min-clean-yield"),
        check_min_rows(guard_min_rows, "--guard-min-rows"),
    )
    config = JobConfig(
        input_path=input_path,
        output_dir=output_dir,
        endpoints=resolve_endpoints(servers, runs, routers, fleets),
        model=model,
        sampling=sampling,
        keep_given_turns=keep_given_turns,
        concurrency=concurrency,
        limit=limit,
        dedupe=dedupe,
        strict_rows=strict_rows,
        retry_failed=retry_failed,
        retry_truncated=retry_truncated,
        max_attempts=max_attempts,
        retry_base_s=retry_base_s,
        request_timeout_s=request_timeout_s,
        stall_after_s=stall_after_s,
        give_up_after_s=give_up_after_s,
        flush_interval_s=flush_interval_s,
        rows_per_part=rows_per_part,
        progress_interval_s=progress_interval_s,
        yield_floor=floor,
    )
    from specpilot.generate.eta import Watcher, all_of, projecting

    watchers: list[Watcher] = []
    if serve_status is not None:
        from specpilot.status.server import bind, url_of, watch_job

        sock = bind(serve_status, public=status_public, flag="--serve-status")
        out.note(f"status page: {url_of(sock)}  metrics: {url_of(sock)}metrics")
        watchers.append(watch_job(sock, output_dir, status_hosts))
    if progress_interval_s > 0:
        watchers.append(projecting(output_dir, progress_interval_s, out.note))
    from specpilot.cli.loop import run
    from specpilot.launch.shield import ending_signals

    # SIGINT, SIGTERM and SIGHUP: the first lets the requests in flight finish, then the job ends
    with ending_signals():
        try:
            outcome = run(generate_in_loop(config, all_of(watchers)))
        except KeyboardInterrupt:  # before the rows are sent, or after (no summary then)
            interrupted = Interrupted("interrupted; the same command resumes the job")
            out.fail(interrupted, fix="run the same command again (finished rows are kept)")
    out.show(_GenerateShown(outcome), indent=None)
    if outcome.exit_code != EXIT_OK:
        sys.exit(outcome.exit_code)


@dataclass(frozen=True)
class _GenerateShown:
    """The job's summary and how it ended; for a person on stderr, beside the progress lines."""

    outcome: Outcome

    def to_json(self) -> dict[str, Any]:
        outcome = self.outcome
        return {**outcome.summary.to_json(), "exit_code": outcome.exit_code, "message": outcome.message}

    def human(self, out: Human) -> None:
        from specpilot.generate.ledger.report import render_summary

        render_summary(self.outcome.summary, out.console(err=True))
        out.line(self.outcome.message, err=True)


MAX_LENGTH_HELP = (
    "Training max length in tokens (SpecForge's Qwen3.6 recipes: 2048-4096): count rows over it."
)


@click.command("report", epilog="\b\nExample:\n  specpilot report out/ --max-length 4096 --json")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--max-length", "max_length_tokens", type=click.IntRange(1), default=None, help=MAX_LENGTH_HELP)
@click.option(
    "--gpus",
    type=click.IntRange(1),
    default=None,
    help="Project the job's time on this many GPUs (default: the job's own servers).",
)
@json_option("Print the summary as JSON.")
def report(directory: Path, max_length_tokens: int | None, gpus: int | None, out: Output) -> None:
    """Summary of a generate job from its ledger; safe while the job runs."""
    from specpilot.export.lengths import length_report
    from specpilot.generate.eta import projected_eta, report_projections
    from specpilot.generate.ledger.report import reading_ledger, summarize
    from specpilot.generate.writers.committed import committed_rows
    from specpilot.generate.writers.parts import CLEAN, FLAGGED
    from specpilot.job.record import read_exports

    with reading_ledger(directory) as ledger:
        summary = summarize(ledger)
    summary = dataclasses.replace(summary, exports=read_exports(directory))  # a job's folder: its exports
    if max_length_tokens is not None:
        lengths = {
            split.directory: length_report(committed_rows(directory, (split,)), max_length_tokens)
            for split in (CLEAN, FLAGGED)
        }
        summary = dataclasses.replace(summary, lengths=lengths)
    projections = report_projections(directory, summary, gpus)
    # on other GPUs than the job's own the projection is a what-if, not this job's eta
    shown = projected_eta(summary, projections) if gpus is None else summary
    out.show(_ReportShown(shown, projections), indent=None)


@dataclass(frozen=True)
class _ReportShown:
    summary: JobSummary
    projected: dict[str, Projection]

    def to_json(self) -> dict[str, Any]:
        shown = {name: p.to_json() for name, p in self.projected.items()}
        return {**self.summary.to_json(), "projection": shown}

    def human(self, out: Human) -> None:
        from specpilot.generate.ledger.report import render_lengths, render_summary

        console = out.console()
        render_summary(self.summary, console)
        for split, lengths in (self.summary.lengths or {}).items():
            render_lengths(split, lengths, console)
        for name, projection in self.projected.items():
            console.print(f"projected, {name}: {projection.line()}", soft_wrap=True)


EXAMPLE_EXPORT = """\b
Example:
  specpilot export out/ --format specforge --max-length 4096
  specpilot export out/ --format parquet --include-flagged"""


@click.command("export", epilog=EXAMPLE_EXPORT)
@click.argument("directory", type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    required=True,
    type=click.Choice(list(FORMATS)),
    help=format_help(),
)
@click.option(
    "--to",
    "target",
    type=click.Path(path_type=Path),
    default=None,
    help=target_help(),
)
@click.option("--include-flagged", is_flag=True, help="Also export the flagged rows (truncated, empty, ...).")
@click.option(
    "--chat-template",
    default=None,
    help="The SpecForge template you will train with; refused if it would change the text "
    "(default: the one for the job's model, qwen3.5 for Qwen3.5/3.6).",
)
@click.option(
    "--per-turn/--whole-conversations",
    "per_turn",
    default=None,
    help="specforge: one training row per target turn, its history as context, so every target "
    "turn is in SpecForge's loss (the default); or one row per conversation (its loss covers "
    "only the last turn with Qwen3.x templates).",
)
@click.option("--max-length", "max_length_tokens", type=click.IntRange(1), default=None, help=MAX_LENGTH_HELP)
@click.option("--overwrite", is_flag=True, help="Replace an earlier export at the target.")
@click.option(
    "--tokenizer",
    type=click.Path(path_type=Path),
    default=None,
    help="The model folder whose tokenizer and chat template the train-ready check reads "
    "(default: the job's model, when it is a local folder).",
)
@click.option(
    "--no-train-check",
    is_flag=True,
    help="Skip the train-ready check (a sample re-tokenized with the trainer's template must give "
    "the server's completion_tokens; a mismatch exits 1, the export written).",
)
@json_option("Print the files written as JSON.")
def export(
    directory: Path,
    fmt: str,
    target: Path | None,
    include_flagged: bool,
    chat_template: str | None,
    per_turn: bool | None,
    max_length_tokens: int | None,
    overwrite: bool,
    tokenizer: Path | None,
    no_train_check: bool,
    out: Output,
) -> None:
    """Export the finished rows of a generate job for SpecForge, speculators or datasets."""
    from specpilot.export.run import chat_template as export_template
    from specpilot.export.run import export as run_export
    from specpilot.export.trainready import FIX as TRAIN_CHECK_FIX
    from specpilot.generate.ledger.report import reading_ledger
    from specpilot.progress import ProgressLines, stderr_is_terminal

    spec = format_named(fmt, field="--format")
    _refuse_turn_choice(spec, fmt, per_turn)
    with reading_ledger(directory) as ledger:
        meta = ledger.meta()
    template, warnings = export_template(spec, chat_template, meta.get("model"))
    split_turns = spec.splits_turns and per_turn is not False
    _refuse_tokenizer(tokenizer)
    lines = ProgressLines(f"export {fmt}")
    result = run_export(
        directory,
        fmt,
        target,
        include_flagged=include_flagged,
        per_turn=split_turns,
        # off a terminal: a line every PROGRESS_EVERY_S with the rows written so far
        done=None if stderr_is_terminal() else lambda rows: lines.update("writing", f"{rows:,} rows"),
        overwrite=overwrite,
        skip_train_check="--no-train-check" if no_train_check else None,
        tokenizer=tokenizer,
        chat_template=template,
    )
    if not stderr_is_terminal():  # the last line is the total, not the last throttled count
        lines.say("written", f"{result.rows:,} rows")
    warnings += result.warnings
    over, too_long = _over_max_length(directory, include_flagged, max_length_tokens)
    warnings += too_long
    out.show(_ExportShown(fmt, split_turns, result, include_flagged, template, over, warnings), indent=None)
    if result.train_ready.failed:
        # the result above is the one object under --json; the failure is its line and exit code
        click.echo(f"error: {result.train_ready.line()} ({TRAIN_CHECK_FIX})", err=True)
        sys.exit(EXIT_FAILED)


def _refuse_turn_choice(spec: ExportFormat, fmt: str, per_turn: bool | None) -> None:
    """--per-turn and --whole-conversations only where the format splits turns."""
    if per_turn is None or spec.splits_turns:
        return
    flag = "--per-turn" if per_turn else "--whole-conversations"
    raise UserError(
        f"{flag} applies to --format {names_with(lambda f: f.splits_turns)} only",
        field=flag,
        fix=f"drop it (--format {fmt} keeps whole conversations; speculators splits turns itself)",
    )


def _refuse_tokenizer(tokenizer: Path | None) -> None:
    """--tokenizer names a folder that holds a tokenizer."""
    from specpilot.export.tokenizer import is_tokenizer_folder

    if tokenizer is not None and not is_tokenizer_folder(tokenizer):
        raise UserError(
            f"{tokenizer} holds no tokenizer.json or tokenizer_config.json",
            field="--tokenizer",
            fix="give the model's folder (where its tokenizer files are), or pass --no-train-check",
        )


def _over_max_length(
    directory: Path, include_flagged: bool, max_length_tokens: int | None
) -> tuple[int | None, list[str]]:
    """With --max-length: how many of the job's rows the trainer would cut, and the warning
    where any would be."""
    from specpilot.export.lengths import length_report
    from specpilot.generate.writers.committed import committed_rows
    from specpilot.generate.writers.parts import CLEAN, FLAGGED

    if max_length_tokens is None:
        return None, []
    splits = (CLEAN, FLAGGED) if include_flagged else (CLEAN,)
    over: int = length_report(committed_rows(directory, splits), max_length_tokens)["over_max_length"]
    if not over:
        return over, []
    return over, [
        f"{over} of the job's rows are longer than --max-length {max_length_tokens}: "
        "the trainer cuts them (see `specpilot report DIR --max-length N`)"
    ]


@dataclass(frozen=True)
class _ExportShown:
    """What was written; for a person the warnings follow on stderr."""

    fmt: str
    per_turn: bool
    result: ExportResult
    flagged_included: bool
    chat_template: str | None
    over_max_length: int | None
    warnings: list[str]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.fmt,
            "per_turn": self.per_turn,
            "files": [str(f) for f in self.result.files],
            "rows": self.result.rows,
            "flagged_included": self.flagged_included,
            "chat_template": self.chat_template,
            "over_max_length": self.over_max_length,
            "warnings": self.warnings,
            "train_ready": self.result.train_ready.to_json(),
        }

    def human(self, out: Human) -> None:
        files = self.result.files
        where = files[0] if len(files) == 1 else files[0].parent
        out.line(f"wrote {self.result.rows} rows ({self.fmt}) to {where}")
        if self.chat_template is not None:
            template = self.chat_template
            out.line(f"train with chat template {template} (SpecForge: --chat-template {template})")
        for warning in self.warnings:
            out.line(f"warning: {warning}", err=True)
        if not self.result.train_ready.failed:  # a mismatch is the command's error line
            out.line(self.result.train_ready.line(), err=self.result.train_ready.skipped is not None)
