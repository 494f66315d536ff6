"""The fleet side of `up`, `status`, `logs`, `down` (a fleet file or a fleet's name), and
`fleet-repair`."""

from __future__ import annotations

import asyncio
import sys

import click
from rich.console import Console

from specpilot import jsontext
from specpilot.errors import EXIT_FAILED, EXIT_OK


def fleet_up(path: str, as_json: bool) -> int:
    from specpilot.fleet.spec import load_fleet
    from specpilot.fleet.up import fleet_up as bring_up

    fleet = load_fleet(path)
    console = Console(stderr=True)
    outcome = asyncio.run(bring_up(fleet, (lambda line: None) if as_json else console.print))
    if as_json:
        click.echo(
            jsontext.dumps(
                {
                    "name": outcome.name,
                    "router_url": outcome.router_url,
                    "registered": outcome.registered,
                    "members": [m.to_json() for m in outcome.members],
                },
                indent=2,
            )
        )
    else:
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
    return EXIT_OK if outcome.registered else EXIT_FAILED


def fleet_status(name: str, as_json: bool) -> int:
    from specpilot.fleet.ops import fleet_status as status

    result = asyncio.run(status(name))
    if as_json:
        click.echo(jsontext.dumps(result.to_json(), indent=2))
    else:
        console = Console()
        routers = "  ".join(
            f"{url} {'[green]up[/]' if alive else '[red]not running[/]'}"
            for url, alive in result.routers.items()
        )
        console.print(f"[bold]fleet {name}[/]  router {routers}")
        if result.repair:
            console.print(f"  router down: {result.repair}", soft_wrap=True)
        for m in result.members:
            serving = "[green]serving[/]" if m.serving else "[red]not serving[/]"
            routed = "registered" if m.registered else "[yellow]not registered[/]"
            console.print(f"  {m.name}  {m.target}  {m.phase}  {serving}  {routed}", soft_wrap=True)
    return EXIT_OK if result.healthy else EXIT_FAILED


def fleet_down(name: str, as_json: bool) -> int:
    from specpilot.fleet.ops import fleet_down as down

    result = asyncio.run(down(name))
    if as_json:
        click.echo(jsontext.dumps(result, indent=2))
    else:
        click.echo(f"{name}: router {result['router']}")
        for member in result["members"]:
            click.echo(f"  {member['name']}: {member['stopped']}")
    failed = any(m.get("phase") == "stop_failed" for m in result["members"]) or result["router"] == "survived"
    return EXIT_FAILED if failed else EXIT_OK


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
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per pass.")
@click.pass_context
def fleet_repair(
    ctx: click.Context,
    name: str,
    max_restarts: int,
    backoff_s: float,
    watch: bool,
    interval_s: float,
    as_json: bool,
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

    from specpilot.fleet.repair import load_recorded_fleet, repair_fleet

    fleet = load_recorded_fleet(name)
    console = Console(stderr=True)
    say = (lambda line: None) if as_json else console.print
    restarts: dict[str, int] = {}
    while True:
        result = asyncio.run(
            repair_fleet(fleet, max_restarts=max_restarts, backoff_s=backoff_s, say=say, restarts=restarts)
        )
        repairs = result.members
        if as_json:
            click.echo(
                jsontext.dumps(
                    {
                        "name": name,
                        "router": result.router_action,
                        "routers": [r.to_json() for r in result.routers],
                        "members": [r.to_json() for r in repairs],
                    }
                )
            )
        else:
            broken = [r for r in repairs if r.action != "ok"]
            router = ROUTER_OUTCOMES[result.router_action]
            console.print(
                f"fleet {name}: router {router}; "
                f"{len(repairs) - len(broken)} of {len(repairs)} members needed nothing"
            )
        if not watch:
            ctx.exit(EXIT_OK if result.healthy else EXIT_FAILED)
        time.sleep(interval_s)
