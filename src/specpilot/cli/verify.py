"""`specpilot verify DIR`: read every committed byte of a generate job and repair what changed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from specpilot.cli.output import Human, Output, json_option
from specpilot.errors import EXIT_FAILED

if TYPE_CHECKING:
    from specpilot.generate.verify import Verified

EXAMPLE_VERIFY = "\b\nExample:\n  specpilot verify out/ --json"


@click.command("verify", epilog=EXAMPLE_VERIFY)
@click.argument("directory", type=click.Path(path_type=Path))
@json_option("Print what was found as JSON.")
def verify(directory: Path, out: Output) -> None:
    """Check every row of a job's parts against the checksum it was written with.

    A start checks only what a crash can touch (sizes, times, the last commit); this reads
    everything, streaming. Each changed or missing row is named, taken out of its part and
    queued again: the same `specpilot generate` command makes it again. Exit 1 if any was found.
    """
    from specpilot.generate.verify import verify_job

    verified = verify_job(directory)
    out.show(_VerifyShown(verified), indent=None)
    if verified.requeued_rows:
        raise click.exceptions.Exit(EXIT_FAILED)


@dataclass(frozen=True)
class _VerifyShown:
    verified: Verified

    def to_json(self) -> dict[str, Any]:
        return self.verified.to_json()

    def human(self, out: Human) -> None:
        verified = self.verified
        for damaged in verified.damaged:
            out.line(f"{damaged.describe()}: taken out, queued again", err=True)
        for part in verified.lost_parts:
            out.line(f"{part} is missing or cut short: its lost rows are queued again", err=True)
        out.line(
            f"{verified.parts} parts, {verified.rows:,} rows checked; "
            + (
                f"{verified.requeued_rows} rows queued again: run the same `specpilot generate` command "
                "to make them"
                if verified.requeued_rows
                else "every row is as it was written"
            )
        )
