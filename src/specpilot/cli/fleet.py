"""The fleet side of `up`, `status`, `logs`, `down` (a fleet file or a fleet's name), and
`fleet-repair`."""

from __future__ import annotations

import asyncio
import json
import sys

import click
from rich.console import Console

from specpilot.errors import EXIT_FAILED, EXIT_OK


def fleet_up(path: str, as_json: bool) -> int:
    from specpilot.fleet.spec import load_fleet
    from specpilot.fleet.up import fleet_up as bring_up

    fleet = load_fleet(path)
    console = Console(stderr=True)
    outcome = bring_up(fleet, (lambda line: None) if as_json else console.print)
    if as_json:
        click.echo(
            json.dumps(
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
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        console = Console()
        router = "[green]up[/]" if result.router_alive else "[red]not running[/]"
        console.print(f"[bold]fleet {name}[/]  router {result.router_url} {router}")
        for m in result.members:
            serving = "[green]serving[/]" if m.serving else "[red]not serving[/]"
            routed = "registered" if m.registered else "[yellow]not registered[/]"
            console.print(f"  {m.name:<24} {m.target:<28} {m.phase:<10} {serving}  {routed}")
    return EXIT_OK if result.healthy else EXIT_FAILED


def fleet_down(name: str, as_json: bool) -> int:
    from specpilot.fleet.ops import fleet_down as down

    result = asyncio.run(down(name))
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        click.echo(f"{name}: router {result['router']}")
        for member in result["members"]:
            click.echo(f"  {member['name']}: {member['stopped']}")
    failed = any(m.get("phase") == "stop_failed" for m in result["members"]) or result["router"] == "survived"
    return EXIT_FAILED if failed else EXIT_OK


def fleet_logs(name: str) -> None:
    from specpilot.fleet.ops import router_log

    path = router_log(name)
    click.echo(f"# router log {path} (a member's engine log: specpilot logs {name}-0)", err=True)
    with open(path, "rb") as log:
        sys.stdout.buffer.write(log.read())
