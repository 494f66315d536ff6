"""`specpilot view`: the status page of a generate job, read from its ledger; `--serve-status` options."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from specpilot.status import DEFAULT_ADDR

F = TypeVar("F", bound=Callable[..., Any])

PUBLIC_HELP = "Allow an address other than loopback (the page shows prompt ids and errors)."
HOST_HELP = (
    "Also answer requests for this host name (repeatable; a Prometheus target or a proxy). "
    "Otherwise only the bound address and localhost are answered (421), against DNS rebinding."
)


def serve_status_options(command: F) -> F:
    """`--serve-status [ADDR]`, `--status-public` and `--status-host`, for `generate`."""
    command = click.option("--status-host", "status_hosts", multiple=True, metavar="NAME", help=HOST_HELP)(
        command
    )
    command = click.option("--status-public", is_flag=True, help=PUBLIC_HELP)(command)
    return click.option(
        "--serve-status",
        "serve_status",
        is_flag=False,
        flag_value=DEFAULT_ADDR,
        default=None,
        metavar="[ADDR]",
        help=f"Serve a live status page and /metrics while the job runs (default {DEFAULT_ADDR}).",
    )(command)


@click.command(
    "view",
    epilog=f"\b\nExample:\n  specpilot view out/\n  specpilot view out/ --addr {DEFAULT_ADDR}",
)
@click.argument("directory", metavar="OUTDIR", type=click.Path(path_type=Path))
@click.option("--addr", default=DEFAULT_ADDR, show_default=True, help="Where to serve the page.")
@click.option("--status-public", is_flag=True, help=PUBLIC_HELP)
@click.option("--status-host", "status_hosts", multiple=True, metavar="NAME", help=HOST_HELP)
def view(directory: Path, addr: str, status_public: bool, status_hosts: tuple[str, ...]) -> None:
    """Status page and /metrics of a generate job, read-only from its ledger (safe while it runs)."""
    from specpilot.status.ledger_view import read_snapshot
    from specpilot.status.server import bind, serve_view, url_of

    read_snapshot(directory)  # a folder that is not a job, or a locked ledger: say so now
    sock = bind(addr, public=status_public, flag="--addr")
    click.echo(f"serving {url_of(sock)} for {directory} (Ctrl-C to stop)", err=True)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how the view is ended
        asyncio.run(serve_view(sock, directory, status_hosts))
