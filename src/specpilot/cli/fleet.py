"""The fleet side of `up`, `status`, `logs`, `down` (a fleet file or a fleet's name), and
`fleet-repair`."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import click

from specpilot.cli import loop
from specpilot.cli.output import Human, Output, json_option
from specpilot.errors import EXIT_FAILED, EXIT_OK, Interrupted, JobFailed
from specpilot.launch.shield import ending_signals

if TYPE_CHECKING:
    from specpilot.fleet.ops import FleetStatus
    from specpilot.fleet.repair import FleetRepair
    from specpilot.fleet.spec import Fleet
    from specpilot.fleet.up import FleetOutcome, Started

# The library's progress lines are plain text: each is one note on stderr, in both forms (a
# Rich console wrapped them at 80 columns off a terminal and read brackets as markup).


def fleet_up(path: str, out: Output) -> int:
    from specpilot.fleet.spec import load_fleet
    from specpilot.fleet.up import Started
    from specpilot.fleet.up import fleet_up as bring_up

    fleet = load_fleet(path)
    started = Started()
    # SIGTERM and SIGHUP (the SSH session closed) end it as Ctrl-C does: what started is stopped
    try:
        with ending_signals():
            outcome = loop.run(bring_up(fleet, out.note, started))
    except KeyboardInterrupt:
        _stop_interrupted(
            fleet, started, f"fleet {fleet.name}: every member and router this up started is stopped"
        )
    out.show(_FleetUpShown(outcome))
    return EXIT_OK if outcome.registered else EXIT_FAILED


def _stop_interrupted(fleet: Fleet, started: Started, stopped: str) -> NoReturn:
    """After a signal ended the command's loop: what it started, proven again by the run
    tokens and stopped; then its one line (exit 130)."""
    from specpilot.fleet.up import stop_fleet_started

    left = loop.run(stop_fleet_started(fleet, started))
    if left:
        raise JobFailed("; ".join(left) + " (stopping what the interrupted command started)") from None
    raise Interrupted(f"interrupted: {stopped}") from None


@dataclass(frozen=True)
class _FleetUpShown:
    """Who is behind the router; for a person on stderr, after the members' lines."""

    outcome: FleetOutcome

    def to_json(self) -> dict[str, Any]:
        outcome = self.outcome
        return {
            "name": outcome.name,
            "router_url": outcome.router_url,
            "registered": outcome.registered,
            "members": [m.to_json() for m in outcome.members],
        }

    def human(self, out: Human) -> None:
        outcome, console = self.outcome, out.console(err=True)
        for member in outcome.members:
            if member.phase != "registered":
                console.print(f"[red]left out[/] {member.name} ({member.target}): {member.cause}")
                if member.error:
                    console.print(f"  {member.error.splitlines()[-1] if member.error.splitlines() else ''}")
        total = len(outcome.members)
        if outcome.registered:
            console.print(
                f"[bold green]fleet {outcome.name}[/]: {outcome.registered} of {total} members behind "
                f"{outcome.router_url}  (generate --fleet {outcome.name})"
            )
        else:
            console.print(f"[bold red]fleet {outcome.name}[/]: no member became ready; router stopped")


def fleet_status(name: str, out: Output) -> int:
    from specpilot.fleet.ops import fleet_status as status

    result = asyncio.run(status(name))
    out.show(_FleetStatusShown(name, result))
    return EXIT_OK if result.healthy else EXIT_FAILED


@dataclass(frozen=True)
class _FleetStatusShown:
    name: str
    result: FleetStatus

    def to_json(self) -> dict[str, Any]:
        return self.result.to_json()

    def human(self, out: Human) -> None:
        result, console = self.result, out.console()
        routers = "  ".join(
            f"{url} {'[green]up[/]' if alive else '[red]not running[/]' + _exit_shown(result, url)}"
            for url, alive in result.routers.items()
        )
        console.print(f"[bold]fleet {self.name}[/]  router {routers}")
        if result.repair:
            console.print(f"  router down: {result.repair}", soft_wrap=True)
        for m in result.members:
            serving = "[green]serving[/]" if m.serving else "[red]not serving[/]"
            routed = "registered" if m.registered else "[yellow]not registered[/]"
            console.print(f"  {m.name}  {m.target}  {m.phase}  {serving}  {routed}", soft_wrap=True)


def _exit_shown(result: FleetStatus, url: str) -> str:
    returncode = result.router_exits.get(url)
    return "" if returncode is None else f" (exit status {returncode})"


def fleet_down(name: str, out: Output) -> int:
    from specpilot.fleet.ops import fleet_down as down

    result = asyncio.run(down(name))
    out.show(_FleetDownShown(name, result))
    failed = any(m.get("phase") == "stop_failed" for m in result["members"]) or result["router"] == "survived"
    return EXIT_FAILED if failed else EXIT_OK


@dataclass(frozen=True)
class _FleetDownShown:
    name: str
    result: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return self.result

    def human(self, out: Human) -> None:
        out.line(f"{self.name}: router {self.result['router']}")
        for member in self.result["members"]:
            out.line(f"  {member['name']}: {member['stopped']}")


def fleet_logs(name: str) -> None:
    from specpilot.fleet.ops import router_log

    click.echo(f"# the router's log (a member's engine log: specpilot logs {name}-0)", err=True)
    sys.stdout.buffer.write(asyncio.run(router_log(name)))


ROUTER_OUTCOMES = {"ok": "running", "restarted": "restarted", "gave_up": "not started"}


@click.command("fleet-repair")
@click.argument("name")
@click.option("--max-restarts", default=3, show_default=True, type=click.IntRange(1), help="Per member.")
@click.option(
    "--backoff-s", default=10.0, show_default=True, type=click.FloatRange(0), help="First wait; doubles."
)
@click.option("--watch", is_flag=True, help="Keep checking every --interval-s until Ctrl-C.")
@click.option("--interval-s", default=30.0, show_default=True, type=click.FloatRange(0.1))
@json_option("Print one JSON object per pass.")
@click.pass_context
def fleet_repair(
    ctx: click.Context,
    name: str,
    max_restarts: int,
    backoff_s: float,
    watch: bool,
    interval_s: float,
    out: Output,
) -> None:
    """Restart a dead router and the fleet's dead members with the same verified files, and
    register them again.

    A dead router is started again on its host (as `up` would, the engines keep running)
    and every serving member is registered with it. A member that stopped serving is taken
    out of the router first; one that serves but is not routed is registered again. Exit 0
    when the router runs and every member is serving and routed.

    \b
    Example:
      specpilot fleet-repair qwen36-fleet
      specpilot fleet-repair qwen36-fleet --watch --interval-s 30
    """
    import time

    from specpilot.fleet.repair import Restarts, load_recorded_fleet, repair_fleet
    from specpilot.fleet.up import Started

    fleet = load_recorded_fleet(name)
    restarts = Restarts()
    # as `up`: a signal stops what the pass in flight started (an earlier pass's repairs stay)
    with ending_signals():
        while True:
            started = Started()
            try:
                result = loop.run(
                    repair_fleet(
                        fleet,
                        max_restarts=max_restarts,
                        backoff_s=backoff_s,
                        say=out.note,
                        restarts=restarts,
                        started=started,
                    )
                )
            except KeyboardInterrupt:
                _stop_interrupted(fleet, started, f"what fleet-repair started for {name} is stopped")
            out.show(_FleetRepairShown(name, result), indent=None)
            if not watch:
                ctx.exit(EXIT_OK if result.healthy else EXIT_FAILED)
            try:
                time.sleep(interval_s)
            except KeyboardInterrupt:
                raise Interrupted(
                    f"interrupted: fleet-repair {name} between passes; nothing was starting"
                ) from None


@dataclass(frozen=True)
class _FleetRepairShown:
    """One pass; for a person one line on stderr, after the repairs' lines."""

    name: str
    result: FleetRepair

    def to_json(self) -> dict[str, Any]:
        result = self.result
        return {
            "name": self.name,
            "router": result.router_action,
            "routers": [r.to_json() for r in result.routers],
            "members": [r.to_json() for r in result.members],
        }

    def human(self, out: Human) -> None:
        repairs = self.result.members
        broken = [r for r in repairs if r.action != "ok"]
        router = ROUTER_OUTCOMES[self.result.router_action]
        out.console(err=True).print(
            f"fleet {self.name}: router {router}; "
            f"{len(repairs) - len(broken)} of {len(repairs)} members needed nothing"
        )
