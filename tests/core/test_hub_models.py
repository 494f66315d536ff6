"""A model named by its Hugging Face id is read from the hub cache, on this machine as on a host."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.launch.command import host_model_path
from specpilot.models.host_files import read_spec_model_files
from specpilot.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
QWEN3_8B_CONFIG = (ROOT / "examples" / "models" / "qwen3-8b-vllm" / "config.json").read_text()


def _hub(cache: Path, repo_id: str) -> Path:
    """A hub cache entry as huggingface_hub leaves it: refs/main -> snapshots/<hash>/ -> blobs."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "c0ffee").write_text(QWEN3_8B_CONFIG)
    snapshot = repo / "snapshots" / "5e1f"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").symlink_to(repo / "blobs" / "c0ffee")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("5e1f")
    return snapshot


def _spec(folder: Path, model: str) -> Path:
    spec = folder / "spec.toml"
    spec.write_text(
        f'name = "hub"\n[model]\npath = "{model}"\n[gpu]\nmemory_gib = 80\n'
        '[engine]\nname = "vllm"\nversion = "0.26.0"\nargs = ["--max-model-len", "65536"]\n'
    )
    return spec


def test_local_hub_id_is_read_from_the_hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    snapshot = _hub(tmp_path / "hub", "Qwen/Qwen3-8B")
    spec = load_spec(_spec(tmp_path, "Qwen/Qwen3-8B"))
    files = asyncio.run(read_spec_model_files(spec))
    assert files.config == json.loads(QWEN3_8B_CONFIG)
    assert files.where == f"{snapshot}/config.json on local"
    # check reads it too: the Hub model's 40,960 positions refuse --max-model-len 65536
    checked = CliRunner().invoke(cli, ["check", str(tmp_path / "spec.toml")])
    assert checked.exit_code == 1 and "(40960)" in checked.output
    # and the engine gets the id as written, to resolve from the same cache
    assert host_model_path(spec, home=str(tmp_path), local=True) == "Qwen/Qwen3-8B"


def test_hf_home_is_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    _hub(tmp_path / "hf" / "hub", "Qwen/Qwen3-8B")
    assert (
        asyncio.run(read_spec_model_files(load_spec(_spec(tmp_path, "Qwen/Qwen3-8B")))).config["hidden_size"]
        == 4096
    )


def test_local_hub_id_missing_is_one_line_with_the_cache_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    result = CliRunner().invoke(cli, ["plan", str(_spec(tmp_path, "Qwen/Qwen3-8B"))])
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    assert str(tmp_path / "empty-hub" / "models--Qwen--Qwen3-8B") in errors[0]
    assert "huggingface-cli download Qwen/Qwen3-8B" in errors[0]


def test_a_folder_named_like_an_id_beside_the_spec_wins(tmp_path: Path) -> None:
    folder = tmp_path / "Qwen" / "Qwen3-8B"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(QWEN3_8B_CONFIG)
    spec = load_spec(_spec(tmp_path, "Qwen/Qwen3-8B"))
    assert asyncio.run(read_spec_model_files(spec)).where == str(folder / "config.json")
    assert host_model_path(spec, home="/root", local=True) == str(folder)
