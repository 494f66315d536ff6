"""`specpilot up | status | logs | down`: supervised launch and the run's lifecycle."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import Any

import click
from rich.console import Console
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from specpilot import jsontext
from specpilot.cli.params import FiniteFloat
from specpilot.engines.fix import Fix
from specpilot.errors import JobFailed, UserError
from specpilot.hosts import open_host_section
from specpilot.launch.ops import (
    LOGS_TIMEOUT_S,
    STATUS_TIMEOUT_S,
    clear_leftovers,
    run_down,
    run_status,
    stream_log,
)
from specpilot.launch.outcome import UpResult, describe_returncode
from specpilot.launch.preflight import Preflight, launch_spec, run_preflight
from specpilot.launch.replan import Replan, replan, replan_reason
from specpilot.launch.shield import ending_signals, stop_started
from specpilot.launch.state import check_run_name, read_state
from specpilot.launch.stop import STOP_OUTCOMES
from specpilot.launch.supervisor import launch
from specpilot.models.host_files import ModelRead, read_model
from specpilot.progress import ProgressLines, stderr_is_terminal
from specpilot.spec import Spec, load_spec

#: at most this many re-planned restarts in one `up`: each costs a whole engine start
MAX_REPLANS = 3
#: a ready server being replaced gets this long between SIGTERM and SIGKILL
REPLAN_STOP_TIMEOUT_S = 30.0


def _print_json(data: dict[str, Any]) -> None:
    click.echo(jsontext.dumps(data, indent=2))


def _refusal(spec: Spec, pre: Preflight) -> UpResult:
    """Nothing was started: phase `refused`, with the reason (config or oom) as the cause."""
    return UpResult(
        name=spec.name,
        phase="refused",
        cause=pre.cause or "config",
        error="refused before start (use --force to start anyway):\n" + "\n".join(pre.errors),
        fix=pre.fix,
    )


def _fix_lines(fix: Fix) -> list[str]:
    lines = [fix.text] if fix.text else []
    if fix.args:
        lines.append("args: " + " ".join(fix.args))
    if fix.env:
        lines.append("env:  " + " ".join(f"{k}={v}" for k, v in fix.env.items()))
    if fix.remove_args or fix.remove_env:
        lines.append("drop: " + " ".join((*fix.remove_args, *fix.remove_env)))
    return lines


def _number(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,.4g}"


def _render_result(result: UpResult, console: Console) -> None:
    if result.phase == "ready":
        console.print(
            f"[bold green]ready[/]  {result.name}  pid {result.pid}  {result.endpoint}  "
            f"({result.elapsed_s:.1f} s; argv and env verified)"
        )
    else:
        if result.phase == "refused":
            console.print(f"[bold red]refused[/] before start: [bold]{result.cause}[/]; nothing was started")
        else:
            where = f" during '{result.last_phase}'" if result.last_phase else ""
            console.print(
                f"[bold red]failed[/]: [bold]{result.cause}[/]{where} after {result.elapsed_s:.1f} s"
            )
        if result.exit_status is not None:
            console.print(f"the engine {describe_returncode(result.exit_status)}")
        if result.error:  # unboxed, so the traceback copies cleanly
            console.rule("error", style="red")
            console.print(Text(result.error), soft_wrap=True)
            console.rule(style="red")
        if result.fix is not None:
            console.print(Panel(Text("\n".join(_fix_lines(result.fix))), title="fix"))
        if result.pid is not None:
            console.print(f"process group {result.pid} stopped; nothing left running")
    if result.allocations:
        table = Table("allocation", "engine", "plan", "diff")
        planned = {d["key"]: d for d in result.plan_diff}
        for key, value in sorted(result.allocations.items()):
            diff = planned.get(key)
            if diff is None:
                table.add_row(key, _number(value), "-", "-")
            else:
                style = "bold yellow" if diff["warn"] else ""
                table.add_row(
                    key,
                    _number(value),
                    _number(diff["planned"]),
                    Text(f"{diff['diff_pct']:+.1f}%", style),
                )
        console.print(table)
    for diff in result.plan_diff:
        if diff["warn"]:
            console.print(
                f"[yellow]warning[/]: {diff['key']} is {_number(diff['engine'])}, the plan said "
                f"{_number(diff['planned'])} ({diff['diff_pct']:+.1f}%, more than 5%)"
            )


async def _up(spec: Spec, pre: Preflight, as_json: bool, console: Console) -> UpResult:
    host = open_host_section(spec.host)
    try:
        if not stderr_is_terminal():
            # a log or a pipe: a line per phase and every PROGRESS_EVERY_S, with the last log line
            lines = ProgressLines(f"up {spec.name}")

            def say(phase: str, elapsed_s: float, last: str | None) -> None:
                lines.update(phase, (last or "")[-120:])

            return await launch(spec, host, plan=pre.plan, progress=say)
        if as_json:
            return await launch(spec, host, plan=pre.plan)
        line = Text(f"{spec.name}: shipping and starting on {spec.host.target}")
        with Live(line, console=console, refresh_per_second=8, transient=True) as live:

            def progress(phase: str, elapsed_s: float, last: str | None) -> None:
                shown = (last or "")[-120:]
                live.update(Text(f"{spec.name}  {phase}  {elapsed_s:6.1f} s  {shown}"))

            return await launch(spec, host, plan=pre.plan, progress=progress)
    finally:
        await host.close()


@click.command("up")
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="Start even when check or plan refuses.")
@click.option(
    "--replan",
    type=click.IntRange(0, MAX_REPLANS),
    default=0,
    show_default=True,
    metavar="N",
    help="When the engine runs out of memory, or is ready with allocations more than 5% from the "
    "plan, plan again from the numbers it printed and start again, at most N times. Off by "
    "default: it changes your flags (each change is printed).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object at the end.")
@click.pass_context
def up(ctx: click.Context, spec_path: str, force: bool, replan: int, as_json: bool) -> None:
    """Start the spec's server under supervision and wait until it is ready or failed.

    A fleet file (a [fleet] table: one server spec on many hosts) starts every member
    and one `smg` router in front of them.

    Runs check and plan, ships the run directory with verified hashes, starts the
    engine, proves the live process has the planned argv and env, and classifies
    the whole engine log. Exit 0 ready, 1 failed (nothing left running), 2 bad input.

    \b
    Example:
      specpilot up examples/qwen36-27b-mtp-sglang.toml
      specpilot up my-server.toml --json
      specpilot up my-server.toml --replan 2
    """
    from specpilot.fleet.spec import is_fleet_file

    if is_fleet_file(spec_path):
        from specpilot.cli.fleet import fleet_up

        if force or replan:
            raise UserError(
                "--force and --replan apply to one server spec, not a fleet",
                field="--force" if force else "--replan",
                fix="start the server spec alone with them first, then the fleet without",
            )

        ctx.exit(fleet_up(spec_path, as_json))
    spec = load_spec(spec_path)
    check_run_name(spec.name)
    # SIGTERM and SIGHUP (the SSH session closed) end it as Ctrl-C does: what started is stopped
    try:
        with ending_signals():
            result, replans = asyncio.run(_start(spec, force, replan, as_json))
    except KeyboardInterrupt:
        left = asyncio.run(stop_started([spec.name]))  # the start's loop ended with the interrupt
        if left:
            raise JobFailed("; ".join(left) + " (stopping the interrupted start)") from None
        click.echo(f"interrupted: {spec.name} is stopped", err=True)
        ctx.exit(130)
    if as_json:
        _print_json({**result.to_json(), "replans": [r.to_json() for r in replans]})
    ctx.exit(0 if result.phase == "ready" else 1)


async def _start(spec: Spec, force: bool, replan: int, as_json: bool) -> tuple[UpResult, list[Replan]]:
    """The command's one event loop: refuse a live run of the name, then start."""
    await _refuse_if_running(spec.name)
    return await _up_until_settled(spec, force, replan, as_json)


async def _up_until_settled(
    spec: Spec, force: bool, replan: int, as_json: bool
) -> tuple[UpResult, list[Replan]]:
    """Start, re-planned up to `replan` times: the last result and the re-plans made."""
    console = Console()
    replans: list[Replan] = []
    files = await read_model(spec)  # once: a re-plan changes flags, not the model
    while True:
        pre = run_preflight(spec, files)
        if not as_json:
            for warning in pre.warnings:
                console.print(f"[yellow]warning[/]: {warning}")
            for args, why in pre.added:
                console.print(f"adds {' '.join(args)}: {why}")
        if pre.errors and not (force and not replans):
            result = _refusal(spec, pre)
        else:
            result = await _up(launch_spec(spec, pre), pre, as_json, console)
        if result.cause == "port_in_use" and result.pid is None:
            # found before anything started: the spec's port is the input to change (exit 2)
            raise UserError(
                result.error or f"port {spec.server.port} is in use",
                field="[server] port",
                fix=result.fix.text if result.fix else "set another [server] port",
            )
        if not as_json:
            _render_result(result, console)
        change = await _next_replan(spec, result, pre, files, len(replans), replan, console, as_json)
        if change is None:
            break
        replans.append(change)
        spec = change.spec
    return result, replans


async def _next_replan(
    spec: Spec,
    result: UpResult,
    pre: Preflight,
    files: ModelRead,
    done: int,
    allowed: int,
    console: Console,
    quiet: bool,
) -> Replan | None:
    """The re-planned spec to start next, with the reason and changes printed; None to stop.

    A ready server that is re-planned is stopped first (by its process group)."""
    reason = replan_reason(result)
    if reason is None or done >= allowed:
        if reason is not None and not allowed and not quiet:
            console.print(f"[dim]{reason}: `up --replan 1` plans again from the engine's numbers[/]")
        return None
    log_text = await _engine_log(spec.name)
    try:
        change = replan(spec, log_text, pre.plan, files)
    except UserError as err:
        if not quiet:
            console.print(f"[yellow]no re-plan[/]: {err}")
        return None
    if change is None:
        if not quiet:
            console.print("[yellow]no re-plan[/]: the engine's own numbers give the flags that ran")
        return None
    if result.phase == "ready":
        await run_down(spec.name, timeout_s=REPLAN_STOP_TIMEOUT_S)
    if not quiet:
        console.print(f"[bold]re-plan {done + 1} of {allowed}[/]: {reason}")
        for line in (*change.reasons, *change.changes):
            console.print(f"  {line}")
    return change


async def _engine_log(name: str) -> str:
    chunks = [chunk async for chunk in stream_log(name, follow=False)]
    return b"".join(chunks).decode(errors="replace")


async def _refuse_if_running(name: str) -> None:
    """A live run of this name is refused; of a dead one, whatever is left of its
    process group is ended first (a helper that outlived a crash can hold a port or memory)."""
    try:
        state = read_state(name)
    except UserError:
        return
    left = await clear_leftovers(name)
    if left is None:
        raise UserError(
            f"run {name!r} is already running (pid {state.pid} on {state.host.target})",
            field="name",
            fix=f"stop it with `specpilot down {name}` or give the spec another name",
        )
    if left.signalled:
        ended = " ".join(str(pid) for pid in left.signalled if pid not in left.survivors)
        said = f"{name}: ended what the earlier run left in process group {state.pgid}: pid {ended}"
        click.echo(said, err=True)
    if left.unproven:
        click.echo(
            f"{name}: pid {' '.join(map(str, left.unproven))} of the earlier run's process group "
            f"{state.pgid} cannot be proven the run's and were left alone",
            err=True,
        )
    if left.survivors:
        raise JobFailed(
            f"{name}: pid {' '.join(map(str, left.survivors))} of the earlier run's process group "
            f"{state.pgid} survived SIGKILL (most likely stuck in the GPU driver); see "
            f"`ps -o pid,stat,cmd -g {state.pgid}` on {state.host.target} before starting again"
        )


#: --timeout-s of `status` and `logs`: more than 0, at most a day
TIMEOUT_S = FiniteFloat(min=0.0, max=86_400.0, min_open=True)


@click.command("status")
@click.argument("name")
@click.option("-n", "--lines", default=10, show_default=True, help="Log lines to show.")
@click.option(
    "--timeout-s",
    type=TIMEOUT_S,
    default=STATUS_TIMEOUT_S,
    show_default=True,
    help="Wait this long for the endpoint's answer; a busy engine that answers later is shown "
    "as 'slow to answer (N s)'.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@click.pass_context
def status(ctx: click.Context, name: str, lines: int, timeout_s: float, as_json: bool) -> None:
    """Phase, pid, uptime, endpoint answer and the last log lines of a run.

    Exit 0 when the process is alive and its endpoint answers 200, else 1 (a slow
    answer included: the endpoint is not serving within --timeout-s).

    \b
    Example:
      specpilot status qwen36-mtp
    """
    from specpilot.fleet.state import is_fleet

    if is_fleet(name):
        from specpilot.cli.fleet import fleet_status

        ctx.exit(fleet_status(name, as_json))
    result = asyncio.run(run_status(check_run_name(name), lines=lines, timeout_s=timeout_s))
    if as_json:
        _print_json(result.to_json())
    else:
        console = Console()
        alive = "[green]alive[/]" if result.alive else "[red]not running[/]"
        uptime = f"up {result.uptime_s:.0f} s" if result.uptime_s is not None else ""
        console.print(f"[bold]{name}[/]  {result.phase}  pid {result.pid} {alive}  {uptime}")
        if result.crash is not None:
            console.print(f"[bold red]{result.crash.cause}[/] after ready: {result.crash.line}")
        if result.pid_reused:
            console.print(f"pid {result.pid} now belongs to another process: the run's own is gone")
        if result.exit_status is not None:
            console.print(f"the engine {describe_returncode(result.exit_status)}")
        if result.leftovers:
            pids = " ".join(map(str, result.leftovers))
            console.print(f"the engine left pid {pids} running: `specpilot down {name}` ends them")
        if result.leftovers_unproven:
            pids = " ".join(map(str, result.leftovers_unproven))
            console.print(
                f"pid {pids} of process group {result.pid} cannot be proven the run's, so no command of "
                f"specpilot signals them; see `ps -o pid,lstart,cmd -g {result.pid}`"
            )
        state = result.endpoint_state or "-"
        answer = state if state.startswith("slow") else f"answer {state}"
        console.print(f"endpoint {result.endpoint}  {answer}  model {result.served_model_name}")
        if result.last_lines:
            console.print(Panel(Text("\n".join(result.last_lines)), title="last lines"))
    ctx.exit(0 if result.serving else 1)


@click.command("logs")
@click.argument("name")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the run stops (or Ctrl-C).")
@click.option(
    "--timeout-s",
    type=TIMEOUT_S,
    default=LOGS_TIMEOUT_S,
    show_default=True,
    help="Give up, saying so in one line, when the host does not hand over the log within this long.",
)
def logs(name: str, follow: bool, timeout_s: float) -> None:
    """Print a run's whole engine log (with -f, keep following it until the run stops).

    \b
    Example:
      specpilot logs qwen36-mtp -f
    """

    from specpilot.fleet.state import is_fleet

    if is_fleet(name):
        from specpilot.cli.fleet import fleet_logs

        fleet_logs(name)
        return

    async def copy() -> None:
        async for chunk in stream_log(check_run_name(name), follow=follow, timeout_s=timeout_s):
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()

    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how `logs -f` is ended
        asyncio.run(copy())


@click.command("down")
@click.argument("name")
@click.option(
    "--timeout-s",
    type=FiniteFloat(min=0.0, max=86_400.0),
    default=30.0,
    show_default=True,
    help="SIGKILL what is left of the run after this long.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@click.pass_context
def down(ctx: click.Context, name: str, timeout_s: float, as_json: bool) -> None:
    """Stop a run: SIGTERM to its process group, SIGKILL after --timeout-s.

    Only processes provably the run's are signalled (its group while the engine lives, or
    those carrying its token). Exit 0 when nothing of it is left running, 1 when a process
    survived SIGKILL or nothing could be proven the run's (an older record).

    \b
    Example:
      specpilot down qwen36-mtp
    """
    from specpilot.fleet.state import is_fleet

    if is_fleet(name):
        from specpilot.cli.fleet import fleet_down

        ctx.exit(fleet_down(name, as_json))
    result = asyncio.run(run_down(check_run_name(name), timeout_s=timeout_s))
    if as_json:
        _print_json(result)
    else:
        how = STOP_OUTCOMES.get(result["stopped"], f"stop ended with {result['stopped']!r}")
        click.echo(f"{name}: process group {result['pid']} {how.replace('PGID', str(result['pid']))}")
        if result.get("survivors"):
            click.echo(f"{name}: still alive: pid {' '.join(map(str, result['survivors']))}")
        if result.get("unproven"):
            pids = " ".join(map(str, result["unproven"]))
            click.echo(f"{name}: not signalled (not provably the run's): pid {pids}")
    ctx.exit(1 if result["phase"] == "stop_failed" or result["stopped"] == "unproven" else 0)
