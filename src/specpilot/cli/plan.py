"""`specpilot plan`: does it fit, what will the engine allocate, which knobs start first time."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from specpilot.check.resolved import ResolvedSpec, resolve
from specpilot.cli.inputs import PASSTHROUGH, SpecCommand, resolve_spec, spec_options
from specpilot.cli.output import Human, Output, json_option
from specpilot.engines.adapter import Engine, EngineRelease
from specpilot.engines.logfacts import LogFacts
from specpilot.engines.registry import ENGINES
from specpilot.errors import EXIT_FAILED, EXIT_OK, UserError
from specpilot.models.host_files import read_model
from specpilot.plan import make_plan
from specpilot.plan.calibrate import calibrate_from_log
from specpilot.plan.serving import with_serving_args
from specpilot.plan.startup_peak import StartupPeak, measure_startup_peak
from specpilot.plan.text import render_plan, render_startup_peak
from specpilot.plan.types import Plan
from specpilot.projection import Projection, project, read_bench
from specpilot.secrets import redact, secret_values
from specpilot.spec import Spec


def refuse_rejected_flags(resolved: ResolvedSpec) -> None:
    """A plan for flags the engine refuses at startup would describe a server that never runs."""
    spec, report = resolved.spec, resolved.check
    errors = [finding for finding in report.findings if finding.severity == "error"]
    if not errors:
        return
    first = errors[0]
    more = f" (+{len(errors) - 1} more: specpilot check shows all)" if len(errors) > 1 else ""
    fix = first.fix.describe() if first.fix else ""
    secrets = secret_values(spec.engine.env, spec.engine.args)
    raise UserError(
        redact(
            f"{spec.engine.name} {spec.engine.version} would refuse these flags: {first.message}{more}",
            secrets,
        ),
        field="[engine] args",
        fix=redact(f"fix: {fix}", secrets) if fix else "run specpilot check --fix",
    )


def _draw(
    resolved: ResolvedSpec,
    facts: LogFacts | None,
    result: Plan,
    svg_path: Path | None,
    html_path: Path | None,
) -> list[str]:
    """The card as a picture; a speculative spec is drawn next to the same spec without it.
    One line per file written, saying what it holds."""
    from specpilot.plan.compare import without_speculation
    from specpilot.plan.picture import card_of, render_html, render_svg

    spec = resolved.spec
    plans = [(result, "as given")]
    plain = without_speculation(spec)
    if plain is not None:
        plans = [
            (result, "with speculative decoding"),
            (make_plan(resolved.respec(plain), facts), "without it"),
        ]
    cards = [card_of(p, f"{spec.name}: {title}") for p, title in plans]
    drawn = "the card with and without speculative decoding" if plain is not None else "the card"
    written = []
    outputs = (
        (svg_path, render_svg(cards), f"{drawn}, to scale (SVG)"),
        (
            html_path,
            render_html(cards, [p for p, _ in plans]),
            f"{drawn}, to scale, with the memory tables (HTML page)",
        ),
    )
    for path, text, holds in outputs:
        if path is None:
            continue
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as err:
            raise UserError(
                f"cannot write {path}: {err.strerror}", field="--svg/--html", fix="choose a writable path"
            ) from None
        written.append(f"wrote {path}: {holds}")
    return written


def _startup_peak(engine: Engine, from_log: str | None, samples: str | None) -> StartupPeak | None:
    """The measured low point of the logged start, when its samples are given."""
    if samples is None:
        return None
    if from_log is None:
        raise UserError(
            "the samples need the engine log of the same start to be placed on its phases",
            field="--samples",
            fix="add --from-log with that start's engine.log",
        )
    markers = engine.startup_phases
    if markers is None:
        readable = " or ".join(e.display_name for e in ENGINES if e.startup_phases is not None)
        raise UserError(
            f"reads {readable} starts only, not {engine.name}'s",
            field="--samples",
            fix="drop --samples for this spec",
        )
    log_text = Path(from_log).read_text(encoding="utf-8", errors="replace")
    return measure_startup_peak(samples, log_text, markers)


def job_projections(
    spec: Spec, release: EngineRelease, job_dir: Path, gpus: int | None
) -> dict[str, Projection] | None:
    """This spec's and the bench winner's projected job time, from the job's bench result."""
    from specpilot.bench.variants import measured_label

    outcome = read_bench(job_dir)
    if outcome is None:
        return None
    found = {}
    own = measured_label(spec, release, list(outcome.measured))
    for label in dict.fromkeys((own, outcome.winner)):
        if label is not None and label in outcome.measured:
            name = f"this spec ({label})" if label == own else f"bench's winner ({label})"
            found[name] = project(outcome.input_rows, outcome.measured[label], gpus)
    return found


@click.command(cls=SpecCommand, context_settings=PASSTHROUGH)
@spec_options
@click.option("--from-log", "from_log", type=click.Path(dir_okay=False), help="Calibrate from an engine log.")
@click.option(
    "--samples",
    "samples",
    type=click.Path(),
    help="With --from-log: the start's GPU memory samples (a folder with memory.tsv and lines.tsv): "
    "its lowest free memory, when, and in which phase.",
)
@json_option("Print the plan as JSON.")
@click.option(
    "--write",
    "write_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the spec with the knobs that start first time to this new file (never overwrites).",
)
@click.option(
    "--svg",
    "svg_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also draw the card to scale as an SVG file (with and without speculation side by side).",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write a standalone HTML page with the drawing and the memory tables.",
)
@click.option(
    "--job",
    "job_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="A job folder holding `specpilot bench`'s result: also project the whole job's time.",
)
@click.option("--gpus", type=click.IntRange(1), default=None, help="With --job: project on this many GPUs.")
def plan(
    spec_or_command: tuple[str, ...],
    gpu_memory_gib: float | None,
    gpu_count: int | None,
    engine_version: str | None,
    from_log: str | None,
    samples: str | None,
    out: Output,
    write_path: Path | None,
    svg_path: Path | None,
    html_path: Path | None,
    job_dir: Path | None,
    gpus: int | None,
) -> None:
    """Exact GPU memory plan: fits or not, what the engine will allocate, the knobs that fit.

    \b
    Examples:
      specpilot plan examples/qwen36-27b-mtp-sglang.toml
      specpilot plan spec.toml --from-log engine.log --json
      specpilot plan spec.toml --from-log engine.log --samples samples/
      specpilot plan spec.toml --svg plan.svg --html plan.html
      specpilot plan spec.toml --job out/ --gpus 8     (after `specpilot bench ... --job out/`)
      specpilot plan examples/qwen36-27b-mtp-sglang.toml --write fits.toml
      specpilot plan --gpu-memory-gib 95.6 -- python -m sglang.launch_server \\
          --model-path examples/models/qwen3.6-27b --speculative-algorithm NEXTN
    Exit: 0 fits, 1 does not fit, 2 bad input.
    """
    spec = resolve_spec(
        spec_or_command,
        gpu_memory_gib=gpu_memory_gib,
        gpu_count=gpu_count,
        engine_version=engine_version,
    )
    resolved, check_fixes, facts = _resolved(spec, out, fixing=write_path is not None, from_log=from_log)
    spec = resolved.spec
    engine = resolved.release.engine
    peak = _startup_peak(engine, from_log, samples)
    result = with_serving_args(resolved, make_plan(resolved, facts), facts)
    drawn = _draw(resolved, facts, result, svg_path, html_path) if svg_path or html_path else []
    projected = job_projections(spec, resolved.release, job_dir, gpus) if job_dir is not None else None
    out.show(_PlanShown(result, engine, peak, job_dir, projected))
    for line in drawn:
        out.step(line)
    if write_path is not None:
        written = _write_recommended(resolved, facts, result, write_path, check_fixed=check_fixes is not None)
        out.step(written)
    # the verdict on the spec given: one that needed check's fixes would not have started
    raise SystemExit(EXIT_OK if result.fits and check_fixes is None else EXIT_FAILED)


def _resolved(
    spec: Spec, out: Output, *, fixing: bool, from_log: str | None
) -> tuple[ResolvedSpec, tuple[Spec, str] | None, LogFacts | None]:
    """The spec resolved once (its model read once, its flags evaluated once, for every step
    below): with `--write` (`fixing`) check's fixes applied first, with `--from-log` calibrated
    on the log; check's fixes and what was read from the log."""
    resolved = resolve(spec, asyncio.run(read_model(spec)))
    check_fixes = _apply_check_fixes(resolved) if fixing else None
    if check_fixes is not None:
        resolved = resolved.respec(check_fixes[0])
        out.step(f"check's fixes, applied before planning: {check_fixes[1]}")
    refuse_rejected_flags(resolved)
    if not from_log:
        return resolved, check_fixes, None
    calibrated, facts = calibrate_from_log(resolved, from_log)
    return resolved.respec(calibrated), check_fixes, facts


@dataclass(frozen=True)
class _PlanShown:
    """The plan; with --samples the measured start, with --job the projected job time."""

    plan: Plan
    engine: Engine
    peak: StartupPeak | None
    job_dir: Path | None
    projected: dict[str, Projection] | None

    def to_json(self) -> dict[str, Any]:
        data = self.plan.to_json()
        if self.peak is not None:
            data["startup_peak"] = self.peak.to_json()
        if self.projected is not None:
            data["projection"] = {label: p.to_json() for label, p in self.projected.items()}
        return data

    def human(self, out: Human) -> None:
        render_plan(self.plan, out.console(), self.engine)
        if self.peak is not None:
            render_startup_peak(self.peak, self.plan, out.console())
        if self.job_dir is None:
            return
        if self.projected is None:
            job_dir = self.job_dir
            out.line(
                f"no bench result in {job_dir}: `specpilot bench SPEC --prompts FILE --job {job_dir}` "
                "measures the rates a projection of the job's time needs"
            )
            return
        for name, projection in self.projected.items():
            out.line(f"projected, {name}: {projection.line()}")


def _apply_check_fixes(resolved: ResolvedSpec) -> tuple[Spec, str] | None:
    """`--write`: the spec with `check --fix`'s changes and what they were, when the engine
    would refuse its flags and check's fixes make it accept them; else None (plan refuses as
    without --write, naming the first refusal)."""
    from specpilot.check import fix_spec

    spec, report = resolved.spec, resolved.check
    if report.ok:
        return None
    fixed = fix_spec(resolved)
    if not fixed.result.ok:
        return None
    secrets = secret_values(spec.engine.env, spec.engine.args)
    changes = [f.fix.describe() for f in report.findings if f.severity == "error" and f.fix is not None]
    new = spec.model_copy(
        update={"engine": spec.engine.model_copy(update={"args": fixed.args, "env": fixed.env})}
    )
    return new, redact("; ".join(changes), secrets)


def _write_recommended(
    resolved: ResolvedSpec, facts: LogFacts | None, result: Plan, path: Path, *, check_fixed: bool
) -> str:
    """`--write`: the spec (with check's fixes when `check_fixed`) with the plan's recommended
    knobs (replacing the same flags) in a new file, planned again to say whether it fits and
    serves. The exit code stays the verdict on the spec given."""
    from specpilot.cli.check import fixed_spec_text, write_new_spec
    from specpilot.engines.fix import Fix
    from specpilot.plan.serving import serving_args, with_fix
    from specpilot.spec import load_spec

    spec = resolved.spec
    if not (result.recommended_args or result.recommended_env or check_fixed):
        return f"nothing written to {path}: the plan has no knobs to change"
    recommended = with_fix(spec, Fix(args=tuple(result.recommended_args), env=dict(result.recommended_env)))
    write_new_spec(
        path, fixed_spec_text(spec, recommended.engine.args, recommended.engine.env, path), field="--write"
    )
    written = resolved.respec(load_spec(path))
    again = make_plan(written, facts)
    if not again.fits:
        return f"wrote {path}: still does not fit: see specpilot plan {path}"
    verdict = f"{again.kv_tokens:,} KV tokens, {again.max_running_requests} running requests"
    if missing := serving_args(written, again):
        needs = " ".join(missing)
        return f"wrote {path}: starts ({verdict}), but needs {needs} to serve: see specpilot plan {path}"
    return f"wrote {path}: plans as fitting and safe to serve ({verdict})"
