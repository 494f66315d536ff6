"""`specpilot up | status | logs | down`: supervised launch and the run's lifecycle."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from dataclasses import dataclass
from typing import Any

import click
from rich.console import Console
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from specpilot.cli import loop
from specpilot.cli.output import Human, Output, json_option
from specpilot.cli.params import FiniteFloat
from specpilot.engines.fix import Fix
from specpilot.errors import Interrupted, JobFailed, UserError
from specpilot.launch.ops import (
    LOGS_TIMEOUT_S,
    STATUS_TIMEOUT_S,
    RunStatus,
    run_down,
    run_status,
    stream_log,
)
from specpilot.launch.outcome import UpResult, describe_returncode
from specpilot.launch.shield import ending_signals, started_here, stop_started
from specpilot.launch.state import check_run_name
from specpilot.launch.stop import STOP_OUTCOMES
from specpilot.launch.up import (
    MAX_REPLANS,
    NoReplan,
    Note,
    Phase,
    Preflighted,
    Replanned,
    Settled,
    SettleOptions,
    Starting,
    UpEvent,
    UpRun,
    port_refusal,
    port_taken,
    run_up,
)
from specpilot.progress import ProgressLines, stderr_is_terminal
from specpilot.spec import load_spec


def _fix_lines(fix: Fix) -> list[str]:
    fix = fix.shown()
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
        _render_failure(result, console)
    if result.allocations:
        console.print(_allocation_table(result))
    for diff in result.plan_diff:
        if diff["warn"]:
            console.print(
                f"[yellow]warning[/]: {diff['key']} is {_number(diff['engine'])}, the plan said "
                f"{_number(diff['planned'])} ({diff['diff_pct']:+.1f}%, more than 5%)"
            )


def _render_failure(result: UpResult, console: Console) -> None:
    """A refused or failed start: why, how the engine ended, its error, the fix, what was stopped."""
    if result.phase == "refused":
        console.print(f"[bold red]refused[/] before start: [bold]{result.cause}[/]; nothing was started")
    else:
        where = f" during '{result.last_phase}'" if result.last_phase else ""
        console.print(f"[bold red]failed[/]: [bold]{result.cause}[/]{where} after {result.elapsed_s:.1f} s")
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


def _allocation_table(result: UpResult) -> Table:
    """What the engine allocated beside what the plan said, the differences past 5% marked."""
    table = Table("allocation", "engine", "plan", "diff")
    planned = {d["key"]: d for d in result.plan_diff}
    for key, value in sorted(result.allocations.items()):
        diff = planned.get(key)
        if diff is None:
            table.add_row(key, _number(value), "-", "-")
            continue
        style = "bold yellow" if diff["warn"] else ""
        table.add_row(key, _number(value), _number(diff["planned"]), Text(f"{diff['diff_pct']:+.1f}%", style))
    return table


class _UpView:
    """`up`'s steps as they happen, for a person (the sink's `human_steps`; under --json the
    object at the end says it all): check's warnings, each start's live line and outcome, each
    re-plan. Off a terminal a line per phase on stderr, in both forms. A context: a live line
    left open is closed on the way out."""

    def __init__(self, out: Output) -> None:
        self.out = out
        self.console = out.human_steps
        self.name = ""
        self.live: Live | None = None
        self.lines: ProgressLines | None = None

    def __enter__(self) -> _UpView:
        return self

    def __exit__(self, *exc: object) -> None:
        self._end_start()

    def _end_start(self) -> None:
        if self.live is not None:
            self.live.stop()
        self.live, self.lines = None, None

    def __call__(self, event: UpEvent) -> None:
        match event:
            case Note(line):
                self.out.note(line)
            case Preflighted(pre) if self.console is None:
                for warning in pre.warnings:  # under --json too (on stderr): a key left in argv
                    self.out.note(f"warning: {warning}")
            case Starting(spec):
                self._starting(spec.name, spec.host.target)
            case Phase(phase, elapsed_s, last):
                shown = (last or "")[-120:]
                if self.lines is not None:
                    self.lines.update(phase, shown)
                elif self.live is not None:
                    self.live.update(Text(f"{self.name}  {phase}  {elapsed_s:6.1f} s  {shown}"))
            case Settled(result):
                self._end_start()
                # a port in use before the start is bad input: `up` says so once it returns
                if self.console is not None and not port_taken(result):
                    _render_result(result, self.console)
            case _ if self.console is not None:
                _say_step(event, self.console)

    def _starting(self, name: str, target: str) -> None:
        self.name = name
        if not stderr_is_terminal():
            # a log or a pipe: a line per phase and every PROGRESS_EVERY_S, with the last log line
            self.lines = ProgressLines(f"up {name}")
        elif self.console is not None:
            line = Text(f"{name}: shipping and starting on {target}")
            self.live = Live(line, console=self.console, refresh_per_second=8, transient=True)
            self.live.start()


def _say_step(event: UpEvent, console: Console) -> None:
    """Check's warnings and flags added before a start; why a start is re-planned or not."""
    match event:
        case Preflighted(pre):
            for warning in pre.warnings:
                console.print(f"[yellow]warning[/]: {warning}")
            for args, why in pre.added:
                console.print(f"adds {' '.join(args)}: {why}")
        case NoReplan(reason, "off"):
            console.print(f"[dim]{reason}: `up --replan 1` plans again from the engine's numbers[/]")
        case NoReplan(_, "cannot_calibrate", error):
            console.print(f"[yellow]no re-plan[/]: {error}")
        case NoReplan(_, "same_flags"):
            console.print("[yellow]no re-plan[/]: the engine's own numbers give the flags that ran")
        case Replanned(number, allowed, reason, change):
            console.print(f"[bold]re-plan {number} of {allowed}[/]: {reason}")
            for line in (*change.reasons, *change.changes):
                console.print(f"  {line}")


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
@json_option("Print one JSON object at the end.")
@click.pass_context
def up(ctx: click.Context, spec_path: str, force: bool, replan: int, out: Output) -> None:
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

        ctx.exit(fleet_up(spec_path, out))
    spec = load_spec(spec_path)
    check_run_name(spec.name)
    view = _UpView(out)
    # SIGTERM and SIGHUP (the SSH session closed) end it as Ctrl-C does: what started is stopped
    try:
        with ending_signals(), view:
            run = loop.run(run_up(spec, SettleOptions(force=force, max_replans=replan), view))
    except KeyboardInterrupt:
        left = loop.run(stop_started([spec.name]))  # the start's loop ended with the interrupt
        if left:
            raise JobFailed("; ".join(left) + " (stopping the interrupted start)") from None
        said = (
            f"interrupted: {spec.name} is stopped"
            if started_here(spec.name)
            # a run already recorded under the name is another command's: left as it is
            else f"interrupted before {spec.name} was started: nothing was stopped"
        )
        interrupted = Interrupted(said)
        out.refusal(interrupted, fix="run the same command again to start it")
        out.note(str(interrupted))
        ctx.exit(interrupted.exit_code)
    refused = port_refusal(run.result, run.spec.server.port)
    if refused is not None:
        raise refused
    out.show(_UpShown(run))
    ctx.exit(0 if run.result.phase == "ready" else 1)


@dataclass(frozen=True)
class _UpShown:
    """The last start and the re-plans; for a person nothing more: each start was shown as it
    settled, each re-plan as it was made."""

    run: UpRun

    def to_json(self) -> dict[str, Any]:
        return self.run.to_json()

    def human(self, out: Human) -> None:
        pass


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
@json_option("Print a JSON object.")
@click.pass_context
def status(ctx: click.Context, name: str, lines: int, timeout_s: float, out: Output) -> None:
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

        ctx.exit(fleet_status(name, out))
    result = asyncio.run(run_status(check_run_name(name), lines=lines, timeout_s=timeout_s))
    out.show(_StatusShown(name, result))
    ctx.exit(0 if result.serving else 1)


@dataclass(frozen=True)
class _StatusShown:
    name: str
    result: RunStatus

    def to_json(self) -> dict[str, Any]:
        return self.result.to_json()

    def human(self, out: Human) -> None:
        name, result, console = self.name, self.result, out.console()
        alive = "[green]alive[/]" if result.alive else "[red]not running[/]"
        if result.phase == "unproven":  # it may run, but nothing proves it the run's
            alive = "[yellow]not provably the run's[/]"
        uptime = f"up {result.uptime_s:.0f} s" if result.uptime_s is not None else ""
        console.print(f"[bold]{name}[/]  {result.phase}  pid {result.pid} {alive}  {uptime}")
        for line in _process_lines(name, result):
            console.print(line)
        state = result.endpoint_state or "-"
        answer = state if state.startswith("slow") else f"answer {state}"
        console.print(f"endpoint {result.endpoint}  {answer}  model {result.served_model_name}")
        if result.last_lines:
            console.print(Panel(Text("\n".join(result.last_lines)), title="last lines"))


def _process_lines(name: str, result: RunStatus) -> list[str]:
    """What became of the run's process: a crash after ready, a reused pid, its exit, what it left."""
    lines = []
    if result.crash is not None:
        lines.append(f"[bold red]{result.crash.cause}[/] after ready: {result.crash.line}")
    if result.pid_reused:
        lines.append(f"pid {result.pid} now belongs to another process: the run's own is gone")
    if result.exit_status is not None:
        lines.append(f"the engine {describe_returncode(result.exit_status)}")
    if result.leftovers:
        pids = " ".join(map(str, result.leftovers))
        lines.append(f"the engine left pid {pids} running: `specpilot down {name}` ends them")
    if result.leftovers_unproven:
        pids = " ".join(map(str, result.leftovers_unproven))
        lines.append(
            f"pid {pids} of process group {result.pid} cannot be proven the run's, so no command of "
            f"specpilot signals them; see `ps -o pid,lstart,cmd -g {result.pid}`"
        )
    return lines


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

    from specpilot.secrets import mask_log_text

    async def copy() -> None:
        # line by line through the mask: a key the engine logged (its args, a URL) is not shown
        partial = b""
        async for chunk in stream_log(check_run_name(name), follow=follow, timeout_s=timeout_s):
            *lines, partial = (partial + chunk).split(b"\n")
            for line in lines:
                sys.stdout.buffer.write(mask_log_text(line.decode(errors="replace")).encode() + b"\n")
            sys.stdout.buffer.flush()
        if partial:
            sys.stdout.buffer.write(mask_log_text(partial.decode(errors="replace")).encode())
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
@json_option("Print a JSON object.")
@click.pass_context
def down(ctx: click.Context, name: str, timeout_s: float, out: Output) -> None:
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

        ctx.exit(fleet_down(name, out))
    result = asyncio.run(run_down(check_run_name(name), timeout_s=timeout_s))
    out.show(_DownShown(name, result))
    ctx.exit(1 if result["phase"] == "stop_failed" or result["stopped"] == "unproven" else 0)


@dataclass(frozen=True)
class _DownShown:
    name: str
    result: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return self.result

    def human(self, out: Human) -> None:
        name, result = self.name, self.result
        how = STOP_OUTCOMES.get(result["stopped"], f"stop ended with {result['stopped']!r}")
        what = f"process group {result['pid']}"
        if result["pid"] in (result.get("unproven") or []) and result.get("signalled"):
            # the record names a process not provably the run's: what was stopped carried its token
            what = "pid " + " ".join(map(str, result["signalled"]))
        out.line(f"{name}: {what} {how.replace('PGID', str(result['pid']))}")
        if result.get("survivors"):
            out.line(f"{name}: still alive: pid {' '.join(map(str, result['survivors']))}")
        if result.get("unproven"):
            pids = " ".join(map(str, result["unproven"]))
            out.line(f"{name}: not signalled (not provably the run's): pid {pids}")
