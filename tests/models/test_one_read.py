"""A command reads the model once, in its event loop, and hands the files to check and plan.

`plan` checks the flags, plans, plans the recommendation again for the flags it needs to
serve, and (with --svg) plans the spec without speculation beside it: every one of those read
config.json and the safetensors headers anew (on an SSH host, a round each)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.models import files, host_files

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "qwen36-27b-mtp-sglang.toml"


def test_plan_reads_the_model_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[Path] = []

    def counted(folder: Path) -> files.ModelFiles:
        reads.append(folder)
        return files.read_local_model(folder)

    monkeypatch.setattr(host_files, "read_local_model", counted)
    result = CliRunner().invoke(cli, ["plan", str(EXAMPLE), "--json", "--svg", str(tmp_path / "card.svg")])
    assert result.exit_code in (0, 1), result.output
    assert (tmp_path / "card.svg").exists()  # the spec without speculation was planned too
    assert reads == [EXAMPLE.parent / "models" / "qwen3.6-27b"], reads
