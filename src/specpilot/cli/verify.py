"""`specpilot verify DIR`: read every committed byte of a generate job and repair what changed."""

from __future__ import annotations

import json
from pathlib import Path

import click

from specpilot.errors import EXIT_FAILED

EXAMPLE_VERIFY = "\b\nExample:\n  specpilot verify out/ --json"


@click.command("verify", epilog=EXAMPLE_VERIFY)
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print what was found as JSON.")
def verify(directory: Path, as_json: bool) -> None:
    """Check every row of a job's parts against the checksum it was written with.

    A start checks only what a crash can touch (sizes, times, the last commit); this reads
    everything, streaming. Each changed or missing row is named, taken out of its part and
    queued again: the same `specpilot generate` command makes it again. Exit 1 if any was found.
    """
    from specpilot.generate.job import verify_job

    verified = verify_job(directory)
    if as_json:
        click.echo(json.dumps(verified.to_json()))
    else:
        for damaged in verified.damaged:
            click.echo(f"{damaged.describe()}: taken out, queued again", err=True)
        for part in verified.lost_parts:
            click.echo(f"{part} is missing or cut short: its lost rows are queued again", err=True)
        click.echo(
            f"{verified.parts} parts, {verified.rows:,} rows checked; "
            + (
                f"{verified.requeued_rows} rows queued again: run the same `specpilot generate` command "
                "to make them"
                if verified.requeued_rows
                else "every row is as it was written"
            )
        )
    if verified.requeued_rows:
        raise click.exceptions.Exit(EXIT_FAILED)
