"""`specpilot runs`: the runs this controller started, their phase, endpoint and age."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click
from rich.table import Column, Table

from specpilot.cli.output import Human, Output, json_option
from specpilot.launch.runs import RunSummary, list_runs

#: a name longer than this may still be cut on a narrow terminal (`--json` has it whole)
NAME_MAX_SHOWN = 64


def _age(age_s: float | None) -> str:
    if age_s is None:
        return "-"
    for unit_s, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if age_s >= unit_s:
            return f"{age_s / unit_s:.0f} {unit}"
    return f"{age_s:.0f} s"


@click.command("runs")
@json_option("Print a JSON list.")
def runs(out: Output) -> None:
    """List the runs known on this machine (newest first): phase, endpoint, age.

    Read from ${SPECPILOT_HOME:-~/.specpilot}/runs; a local run whose process is gone
    shows as `exited`. `specpilot status NAME` asks the host itself.

    \b
    Example:
      specpilot runs
      specpilot runs --json
    """
    out.show(_RunsShown(list_runs()))


@dataclass(frozen=True)
class _RunsShown:
    found: list[RunSummary]

    def to_json(self) -> list[dict[str, Any]]:
        return [run.to_json() for run in self.found]

    def human(self, out: Human) -> None:
        if not self.found:
            out.line("no runs yet (start one with `specpilot up SPEC`)")
            return
        table = Table("phase", "endpoint", "host", "age")
        # names are what `status`/`logs`/`down` take: shown whole, other columns wrap first
        # (a demo run and its bench run differ only after the 24th character)
        widest = max(len(run.name) for run in self.found)
        table.columns.insert(0, Column("name", no_wrap=True, min_width=min(widest, NAME_MAX_SHOWN)))
        for run in self.found:
            table.add_row(run.name, run.phase, run.endpoint or "-", run.target, _age(run.age_s))
        out.console().print(table)
