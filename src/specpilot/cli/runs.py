"""`specpilot runs`: the runs this controller started, their phase, endpoint and age."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Column, Table

from specpilot import jsontext
from specpilot.launch.runs import list_runs

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
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def runs(as_json: bool) -> None:
    """List the runs known on this machine (newest first): phase, endpoint, age.

    Read from ${SPECPILOT_HOME:-~/.specpilot}/runs; a local run whose process is gone
    shows as `exited`. `specpilot status NAME` asks the host itself.

    \b
    Example:
      specpilot runs
      specpilot runs --json
    """
    found = list_runs()
    if as_json:
        click.echo(jsontext.dumps([run.to_json() for run in found], indent=2))
        return
    if not found:
        click.echo("no runs yet (start one with `specpilot up SPEC`)")
        return
    table = Table("phase", "endpoint", "host", "age")
    # names are what `status`/`logs`/`down` take: shown whole, other columns wrap first
    # (a demo run and its bench run differ only after the 24th character)
    widest = max(len(run.name) for run in found)
    table.columns.insert(0, Column("name", no_wrap=True, min_width=min(widest, NAME_MAX_SHOWN)))
    for run in found:
        table.add_row(run.name, run.phase, run.endpoint or "-", run.target, _age(run.age_s))
    Console().print(table)
