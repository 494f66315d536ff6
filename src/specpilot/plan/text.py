"""A plan as a person reads it in a terminal (`plan`, `demo`): the memory table, the
headline numbers, the verdict, each problem's fix and the flags that start first time."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from rich.console import Console
from rich.table import Table

from specpilot.engines.adapter import Engine
from specpilot.plan.startup_peak import StartupPeak
from specpilot.plan.types import Plan, SglangDetails


def command_text(env: Mapping[str, str], args: Sequence[str]) -> str:
    """`NAME=value ... --flag value ...`, quoted as a shell would need it."""
    return " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()), shlex.join(args)]).strip()


def reserve_text(reserve_gib: float, needed_gib: float) -> str:
    """`reserve 7.59 GiB (needs 11.21)`; nothing is said to be needed when nothing is (vLLM's
    reserve with no other process on the card): "(needs 0.00)" reads as a measured need."""
    needs = f" (needs {needed_gib:.2f})" if needed_gib > 0 else ""
    return f"reserve {reserve_gib:.2f} GiB{needs}"


def render_plan(plan: Plan, console: Console, engine: Engine) -> None:
    """The plan as a person reads it: memory table, headline numbers, verdict, fixes; `engine`:
    the plan's engine (the command resolved it)."""
    console.print(_terms_table(plan))
    console.print(
        f"{plan.memory_knob} {plan.memory_fraction:.3f}  weights {plan.weights_gib:.2f} GiB  "
        f"{reserve_text(plan.reserve_gib, plan.reserve_needed_gib)}"
    )
    console.print(
        f"KV: {plan.kv_bytes_per_token:,} bytes/token -> {plan.kv_tokens:,} tokens   "
        f"state: {plan.state_bytes_per_request:,} bytes/request x {plan.state_slots:,} slots   "
        f"max running requests {plan.max_running_requests:,}"
    )
    console.print("[bold green]fits[/]" if plan.fits else "[bold red]does not fit[/]")
    _print_problems(plan, console)
    for note in plan.notes:
        console.print(f"• {note}")
    _print_basis(plan, console, engine)


def _terms_table(plan: Plan) -> Table:
    table = Table(title=f"{plan.engine} {plan.engine_version} memory plan (per GPU)", show_lines=False)
    table.add_column("term")
    table.add_column("GiB", justify="right")
    table.add_column("source")
    table.add_column("note", overflow="fold")
    for term in plan.terms:
        table.add_row(term.name, f"{term.gib:,.2f}", term.source, term.note)
    return table


def _print_problems(plan: Plan, console: Console) -> None:
    for problem in plan.problems:
        console.print(f"[red]✗ {problem.code}[/]: {problem.message}")
        if problem.fix and (fix := problem.fix.describe()):
            console.print(f"    fix: {fix}", markup=False)


def _print_basis(plan: Plan, console: Console, engine: Engine) -> None:
    """The flags that start first time, what was measured, what the plan rests on."""
    if plan.recommended_args or plan.recommended_env:
        console.print("[bold]starts and serves with:[/]")
        console.print("  " + command_text(plan.recommended_env, plan.recommended_args), soft_wrap=True)
    if plan.measured:
        measured = ", ".join(f"{k}={v:g}" for k, v in plan.measured.items())
        console.print(f"measured: {measured}; everything else estimated")
    if plan.provenance:
        basis = plan.provenance.summary(engine.display_name, plan.engine_version)
        console.print(f"rests on: {basis}", soft_wrap=True)


def render_startup_peak(peak: StartupPeak, plan: Plan, console: Console) -> None:
    """The measured low point next to the plan's margin, and every phase's own low point."""
    table = Table(title="measured free GPU memory by phase (NVML, whole device)")
    for column in ("phase", "from s", "to s", "free at start", "lowest", "drop GiB"):
        table.add_column(column, justify="left" if column == "phase" else "right")
    for phase in peak.phases:
        table.add_row(
            phase.name,
            f"{phase.start_s - peak.origin_s:.1f}" if phase.start_s > peak.origin_s else "-",
            f"{phase.end_s - peak.origin_s:.1f}",
            f"{phase.free_at_start_gib:.2f}",
            f"{phase.lowest_free_gib:.2f}",
            f"{phase.drop_gib:.2f}",
        )
    console.print(table)
    span = "start" if peak.ready else "start (never ready)"
    engine_view = (
        f" ({peak.lowest_free_gib - peak.nvml_minus_engine_gib:.2f} GiB as the engine counts it)"
        if peak.nvml_minus_engine_gib is not None
        else ""
    )
    planned = (
        f"; the plan keeps {plan.details.margin_gib:.2f} GiB free after the last startup allocation"
        if isinstance(plan.details, SglangDetails)
        else ""
    )
    console.print(
        f"lowest free memory of the {span}: {peak.lowest_free_gib:.2f} GiB{engine_view} at "
        f"+{peak.lowest_at_s - peak.origin_s:.1f} s, in {peak.phase}{planned}",
        soft_wrap=True,
    )
    console.print(f"  after: {peak.after_line}", markup=False, soft_wrap=True)
