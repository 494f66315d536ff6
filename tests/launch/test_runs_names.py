"""`specpilot runs` shows run names whole: the demo run and its bench run differ after 24 characters."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from specpilot.cli import runs as runs_cli
from specpilot.launch.runs import RunSummary

NAMES = ("specpilot-demo-qwen3-tiny-vllm-cpu", "specpilot-demo-qwen3-tiny-vllm-cpu-bench-0")


def test_long_names_are_shown_whole_on_an_80_column_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    found = [
        RunSummary(
            name, "ready", "ssh://someone@a-long-host-name.example:19248", f"http://10.0.0.5:{port}", 1, 60.0
        )
        for name, port in zip(NAMES, (30000, 30001), strict=True)
    ]
    monkeypatch.setattr(runs_cli, "list_runs", lambda: found)
    monkeypatch.setenv("COLUMNS", "80")
    shown = CliRunner().invoke(runs_cli.runs, []).output
    for name in NAMES:
        assert any(name in line for line in shown.splitlines()), shown
