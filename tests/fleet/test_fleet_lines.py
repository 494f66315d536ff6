"""A fleet's progress lines are printed as the library says them: whole, on stderr.

They went through a Rich console, which off a terminal wrapped a long line at 80 columns and
read `[engine]` in a message as markup (dropping it). No router or engine here: the library's
`fleet_up` is replaced by one that says a line and reports one member registered."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import specpilot.fleet.spec as fleet_spec
import specpilot.fleet.up as fleet_up_module
from specpilot.cli.fleet import fleet_up
from specpilot.cli.output import Output
from specpilot.fleet.up import FleetOutcome, MemberOutcome

SAID = (
    "fl-1 on gpu-host-a.example.internal: refused before start: [engine] args "
    "--speculative-algorithm NEXTN needs --speculative-num-steps; left out"
)


@pytest.mark.parametrize("as_json", [False, True])
def test_a_progress_line_is_printed_whole(
    as_json: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def bring_up(fleet: object, say: Callable[[str], None], started: object) -> FleetOutcome:
        say(SAID)
        return FleetOutcome(
            "fl", "http://127.0.0.1:1", [MemberOutcome("fl-0", "local", "http://w", "registered")]
        )

    monkeypatch.setattr(fleet_spec, "load_fleet", lambda path: object())
    monkeypatch.setattr(fleet_up_module, "fleet_up", bring_up)
    assert len(SAID) > 80
    assert fleet_up("fleet.toml", Output(as_json)) == 0
    assert capsys.readouterr().err.splitlines()[0] == SAID
