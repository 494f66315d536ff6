"""A relative model folder that is not there is named as the cause before what the Hugging Face
cache or the SSH host said when tried in its place."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from specpilot.errors import UserError
from specpilot.models.host_files import read_spec_model_files
from specpilot.spec import load_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _copied(tmp_path: Path, target: str) -> Path:
    """The incident example copied out of examples/ without its models/ folder."""
    text = (EXAMPLES / "qwen36-27b-mtp-sglang.toml").read_text()
    copy = tmp_path / "spec.toml"
    copy.write_text(text.replace('target = "ssh://root@gpu-node:19248"', f'target = "{target}"'))
    return copy


def test_a_local_spec_without_its_model_folder_says_so_before_the_hub(tmp_path: Path) -> None:
    with pytest.raises(UserError) as err:
        asyncio.run(read_spec_model_files(load_spec(_copied(tmp_path, "local"))))
    message = str(err.value)
    assert message.startswith(
        f"[model] path: no model folder {tmp_path / 'models' / 'qwen3.6-27b'} on this machine"
    )
    assert message.index("no model folder") < message.index("Hugging Face cache")


def test_a_remote_spec_without_its_model_folder_says_so_before_the_ssh_error(tmp_path: Path) -> None:
    """The host cannot be reached (port 9 on loopback: nothing listens): the SSH error is kept,
    after the cause a user copying an example most likely has."""
    with pytest.raises(UserError) as err:
        asyncio.run(read_spec_model_files(load_spec(_copied(tmp_path, "ssh://nobody@127.0.0.1:9"))))
    message = str(err.value)
    assert message.startswith("[model] path: no model folder ")
    assert "not found through ssh://nobody@127.0.0.1:9 either" in message


def test_the_folder_beside_the_spec_is_read_as_before(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES / "models" / "qwen3.6-27b", tmp_path / "models" / "qwen3.6-27b")
    files = asyncio.run(read_spec_model_files(load_spec(_copied(tmp_path, "local"))))
    assert files.config["architectures"] == ["Qwen3_5ForConditionalGeneration"]
