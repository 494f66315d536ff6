"""`specpilot bench`: which configuration finishes this job soonest on this GPU, measured."""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from specpilot.cli.output import Human, Output, json_option
from specpilot.cli.params import FiniteFloat, NonEmptyPath
from specpilot.cli.sampling import sampling_options
from specpilot.errors import Interrupted, JobFailed, UserError
from specpilot.generate.sampling import Sampling

if TYPE_CHECKING:
    from specpilot.bench.finish import BenchFinish

#: as a shell reports a process ended by SIGINT
EXIT_INTERRUPTED = 130

EXAMPLE = """\b
Example:
  specpilot bench examples/qwen36-27b-mtp-sglang.toml --prompts prompts.jsonl --job out/
  specpilot bench spec.toml --prompts prompts.jsonl --job out/ --sample 256 \\
      --max-tokens 4096 --variants plain,NEXTN:2 --write best.toml
Then `specpilot generate --output out/ ...` projects its time from out/bench.json.
Exit: 0 a winner, 1 no winner (fewer than two configurations measured, or a server outlived the
stop), 2 bad input (a budget below two configurations' need) or no point could be started, 130
Ctrl-C, SIGTERM or SIGHUP (every server stopped)."""


def _say(line: str) -> None:
    # after SIGHUP (the SSH session closed) stderr may be gone: the stop must go on regardless
    with contextlib.suppress(OSError):
        click.echo(line, err=True)


def _check_writable(path: Path) -> None:
    """Refuse a --write target that exists or cannot be created, before anything is measured."""
    from specpilot.bench.run import new_write_target

    with new_write_target(path):
        pass
    path.unlink()


@click.command("bench", epilog=EXAMPLE)
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=False))
@click.option(
    "--prompts",
    "prompts_path",
    required=True,
    type=NonEmptyPath(path_type=Path),
    help="The job's own prompts (.jsonl, .parquet or a datasets folder, as generate --input reads).",
)
@click.option(
    "--job",
    "job_dir",
    required=True,
    type=NonEmptyPath(path_type=Path),
    help="The job folder (generate's --output): bench.json, bench.svg and the scratch bench/ go there.",
)
@click.option(
    "--sample",
    "sample_rows",
    default=64,
    show_default=True,
    type=click.IntRange(1),
    help="Rows to send each variant, stratified by prompt length (the same rows for each).",
)
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the sample's draw.")
@click.option(
    "--variants",
    default=None,
    help="Comma-separated configurations: plain, METHOD:DRAFT_TOKENS, METHOD:DRAFT_TOKENS:adaptive "
    "(default: plain, the spec's method at 1, 2, 3, and at 3 adaptive where the release has it); "
    "each is searched at several running-request caps; one configuration is searched alone.",
)
# the job's own sampling: a bench on other sampling measures another job
@sampling_options(
    max_tokens_help="As generate's (default: the server's).",
    thinking_help="As generate's.",
    sampling_seed=False,
)
@click.option(
    "--budget-s",
    default=600.0,
    show_default=True,
    type=FiniteFloat(1),
    help="Most seconds the whole search may take: every start, warm-up and sample (each may spend "
    "what is left; a cut sample is measured as far as it got). Bench first says what it expects to "
    "need and refuses less than two configurations need.",
)
@click.option(
    "--warmup-s",
    default=30.0,
    show_default=True,
    type=FiniteFloat(0),
    help="Most seconds of warm-up requests after ready, before the sample.",
)
@click.option(
    "--progress-interval-s",
    default=10.0,
    show_default=True,
    type=FiniteFloat(0),
    help="Seconds between progress lines while a sample runs (0: none).",
)
@click.option("--gpus", type=click.IntRange(1), default=None, help="Project the job on this many GPUs.")
@click.option(
    "--write",
    "write_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the winning variant's spec here (never over an existing file).",
)
@json_option("Print the result as JSON.")
def bench(
    spec_path: str,
    prompts_path: Path,
    job_dir: Path,
    sample_rows: int,
    seed: int,
    variants: str | None,
    sampling: Sampling,
    budget_s: float,
    warmup_s: float,
    progress_interval_s: float,
    gpus: int | None,
    write_path: Path | None,
    out: Output,
) -> None:
    """Search the configurations on the job's own prompts; pick the one that finishes first.

    Each configuration (no speculation; the spec's speculative method at 1, 2 and 3 draft
    tokens; adaptive where the release has it) at running-request caps (the plan's
    maximum, half, a quarter, and the cap the KV cache holds whole) is checked and planned;
    each configuration is screened once (started as `up` starts it, one batch of the sample),
    every cap projected from the screen, the best projected points confirmed with the full
    sample, and lower caps probed while the engine preempts requests or the throughput still
    rises. The projection is the whole input's wall time, waves and tail included. A winner
    needs two configurations measured at their own caps (or one searched alone). Refused,
    failed or unreached points stay in the table with the reason.
    """
    from specpilot.bench.finish import finish_bench
    from specpilot.bench.run import BenchRequest, check_budget, plan_settings, run_bench
    from specpilot.bench.variants import default_variants, parse_variants
    from specpilot.check.resolved import release_of
    from specpilot.cli.loop import run
    from specpilot.generate.rows.inputs import check_output_dir
    from specpilot.launch.shield import ending_signals, stop_started
    from specpilot.launch.state import check_run_name
    from specpilot.spec import load_spec

    spec = load_spec(spec_path)
    check_run_name(spec.name)
    check_budget(budget_s, warmup_s)
    release = release_of(spec)
    chosen = (
        parse_variants(variants, release.engine) if variants is not None else default_variants(spec, release)
    )
    if write_path is not None:
        _check_writable(write_path)
    if gpus is not None and gpus < spec.gpu.count:
        raise UserError(
            f"{gpus} GPUs cannot hold one server of the spec's {spec.gpu.count}",
            field="--gpus",
            fix=f"pass --gpus {spec.gpu.count} or more",
        )
    try:
        check_output_dir(job_dir)
    except UserError as err:
        raise UserError(err.message, field="--job", fix=err.fix) from None
    settings = plan_settings(
        job_dir,
        sample_rows=sample_rows,
        sampling=sampling,
        budget_s=budget_s,
        warmup_s=warmup_s,
        progress_interval_s=progress_interval_s,
    )
    request = BenchRequest(spec, release, prompts_path, job_dir, chosen, sample_rows, seed, settings, gpus)
    # SIGTERM (a scheduler's kill) and SIGHUP (the SSH session closed) end it as Ctrl-C does
    started: list[str] = []
    try:
        with ending_signals():
            result = run(run_bench(request, _say, started))
    except KeyboardInterrupt:
        # run_bench stopped every server it started as the interrupt tore its loop down, where a
        # failure of that stop is only logged: proven again here, each run's port seen free
        left = run(stop_started(started))
        if left:
            raise JobFailed("; ".join(left) + " (stopping what the bench started)") from None
        interrupted = Interrupted("interrupted: every server this bench started is stopped")
        out.refusal(interrupted, fix="run the same command again")
        _say(str(interrupted))
        sys.exit(EXIT_INTERRUPTED)
    finished = finish_bench(result, request, write_path)
    out.show(_BenchShown(finished), indent=None)
    code = finished.exit_code()
    if code:
        sys.exit(code)


@dataclass(frozen=True)
class _BenchShown:
    finished: BenchFinish

    def to_json(self) -> dict[str, Any]:
        return self.finished.to_json()

    def human(self, out: Human) -> None:
        from specpilot.bench.render import render_table, winner_line

        finished, result = self.finished, self.finished.result
        wide = out.console()
        # a table of nine columns: wrapped at 80 columns its numbers break apart
        console = wide if wide.is_terminal else out.console(width=max(wide.width, 140))
        render_table(result, console)
        # the winner's line carries its projection: the whole job, waves and tail, on --gpus
        console.print(winner_line(result))
        console.print(f"result: {finished.bench_path}  chart: {finished.svg_path}")
        if finished.best_path is not None:
            console.print(f"wrote the winning spec to {finished.best_path}")
