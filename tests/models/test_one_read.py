"""A command reads the model once, in its event loop, and hands the files to check and plan.

`plan` checks the flags, plans, plans the recommendation again for the flags it needs to
serve, and (with --svg) plans the spec without speculation beside it: every one of those read
config.json and the safetensors headers anew (on an SSH host, a round each)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.check.resolved import resolve
from specpilot.cli import cli
from specpilot.errors import SpecpilotError, UserError
from specpilot.models import files, host_files
from specpilot.plan import make_plan
from specpilot.spec import load_spec

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


def test_a_model_on_an_ssh_host_is_never_read_outside_the_commands_loop(tmp_path: Path) -> None:
    """Planning a remote spec without the command's read is a bug said in one line, not a
    second event loop (inside a running one, that was "asyncio.run() cannot be called from a
    running event loop")."""
    text = EXAMPLE.read_text().replace('path = "models/qwen3.6-27b"', 'path = "/srv/models/qwen3.6-27b"')
    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(text)
    spec = load_spec(spec_path)
    assert spec.host.target.startswith("ssh://")

    async def in_a_running_loop() -> None:
        make_plan(resolve(spec))

    with pytest.raises(SpecpilotError, match="was not read in the command's event loop"):
        asyncio.run(in_a_running_loop())
    refused = UserError("no config.json at /srv/models/qwen3.6-27b on the host", field="[model] path")
    with pytest.raises(UserError) as raised:
        make_plan(resolve(spec, refused))  # the command's read failed: plan raises that error
    assert raised.value is refused
    assert not resolve(spec, refused).check.model_read  # check runs without the model and says so
