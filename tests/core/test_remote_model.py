"""`[host]` is remote: the model's config.json and safetensors headers are read on that host.

Over a real OpenSSH server on 127.0.0.1 (tests/fixtures/sshd.py); the sshd logs in as
this user, so "the host's" files are made in this test's folder and named by absolute
path, and the hub cache is a folder given to the reader.
"""

from __future__ import annotations

import asyncio
import json
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.errors import UserError
from specpilot.hosts import open_host
from specpilot.models.files import ModelFiles
from specpilot.models.host_files import read_host_model, read_spec_model_files
from specpilot.models.shape import shape_from_files
from specpilot.spec import load_spec
from tests.fixtures.sshd import SshdServer

pytestmark = pytest.mark.sshd

ROOT = Path(__file__).resolve().parents[2]
QWEN3_8B_CONFIG = (ROOT / "examples" / "models" / "qwen3-8b" / "config.json").read_text()


def _weights(path: Path, tensors: dict[str, list[int]]) -> None:
    """A safetensors file: the 8-byte header length, the JSON header, then zero bytes of bf16 data."""
    header: dict[str, object] = {}
    offset = 0
    for name, shape in tensors.items():
        size = 2 * shape[0] * shape[1]
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + bytes(offset))


def _model(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(QWEN3_8B_CONFIG)
    _weights(folder / "model-00001-of-00002.safetensors", {"a.weight": [4, 8]})
    _weights(folder / "model-00002-of-00002.safetensors", {"b.weight": [2, 3], "mtp.fc.weight": [2, 2]})
    return folder


def _spec(tmp_path: Path, sshd: SshdServer, model_path: str, extra_args: str = "") -> Path:
    spec = tmp_path / "spec.toml"
    spec.write_text(
        f'name = "remote"\n[model]\npath = "{model_path}"\n[gpu]\nmemory_gib = 80\n'
        f'[engine]\nname = "vllm"\nversion = "0.26.0"\nargs = ["--max-model-len", "4096"{extra_args}]\n'
        f'[host]\ntarget = "{sshd.target}"\nidentity_file = "{sshd.identity_file}"\n'
        f'known_hosts = "{sshd.known_hosts}"\n'
    )
    return spec


def _read(sshd: SshdServer, model_path: str, hf_cache: Path | None = None) -> ModelFiles:
    async def go() -> ModelFiles:
        async with open_host(
            sshd.target, identity_file=sshd.identity_file, known_hosts=sshd.known_hosts
        ) as host:
            return await read_host_model(host, model_path, hf_cache=str(hf_cache) if hf_cache else None)

    return asyncio.run(go())


def test_config_and_weight_headers_are_read_on_the_host(tmp_path: Path, sshd: SshdServer) -> None:
    model = _model(tmp_path / "models" / "Qwen3-8B")
    files = asyncio.run(read_spec_model_files(load_spec(_spec(tmp_path, sshd, str(model)))))
    assert files.config == json.loads(QWEN3_8B_CONFIG)
    assert files.where == f"{model}/config.json on {sshd.target}"
    shape = shape_from_files(files)
    assert shape.param_count_source == "safetensors"
    assert (shape.param_count, shape.mtp_param_count) == (4 * 8 + 2 * 3 + 2 * 2, 4)


def test_plan_and_check_run_on_a_remote_model(tmp_path: Path, sshd: SshdServer) -> None:
    model = _model(tmp_path / "models" / "Qwen3-8B")
    runner = CliRunner()
    planned = runner.invoke(cli, ["plan", "--json", str(_spec(tmp_path, sshd, str(model)))])
    assert planned.exit_code in (0, 1), planned.output
    # the same model read here plans the same (weights, rotary cache, KV): nothing is lost remotely
    local = _spec(tmp_path, sshd, str(model)).read_text().replace(sshd.target, "local")
    (tmp_path / "local.toml").write_text(local)
    planned_here = runner.invoke(cli, ["plan", "--json", str(tmp_path / "local.toml")])
    assert json.loads(planned.output) == json.loads(planned_here.output)
    # the context-length rule sees the remote config's 40,960 positions
    too_long = _spec(tmp_path, sshd, str(model)).read_text().replace('"4096"', '"65536"')
    (tmp_path / "long.toml").write_text(too_long)
    checked = runner.invoke(cli, ["check", str(tmp_path / "long.toml")])
    assert checked.exit_code == 1
    assert "vllm-max-model-len-over-model" in checked.output and "40960" in checked.output


def test_hub_id_is_read_from_the_hosts_hub_cache(tmp_path: Path, sshd: SshdServer) -> None:
    repo = tmp_path / "hub" / "models--Qwen--Qwen3-8B"
    old, main = repo / "snapshots" / "0000old", repo / "snapshots" / "abc123"
    (old).mkdir(parents=True)
    (old / "config.json").write_text("{}")
    # hub snapshots hold links into blobs/
    blobs = repo / "blobs"
    blobs.mkdir()
    (blobs / "cfg").write_text(QWEN3_8B_CONFIG)
    main.mkdir()
    (main / "config.json").symlink_to(blobs / "cfg")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    files = _read(sshd, "Qwen/Qwen3-8B", tmp_path / "hub")
    assert files.config["hidden_size"] == 4096
    assert files.where == f"{main}/config.json on {sshd.target}"


def test_hub_id_not_in_the_cache_names_host_cache_and_fix(tmp_path: Path, sshd: SshdServer) -> None:
    with pytest.raises(UserError) as raised:
        _read(sshd, "Qwen/Qwen3-8B", tmp_path / "empty-hub")
    message = str(raised.value)
    assert sshd.target in message and str(tmp_path / "empty-hub" / "models--Qwen--Qwen3-8B") in message
    assert "huggingface-cli download Qwen/Qwen3-8B" in message


def test_missing_remote_path_is_one_line_with_host_and_path(tmp_path: Path, sshd: SshdServer) -> None:
    spec = _spec(tmp_path, sshd, str(tmp_path / "models" / "nowhere"))
    result = CliRunner().invoke(cli, ["plan", str(spec)])
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.output
    assert f"no config.json at {tmp_path}/models/nowhere/config.json on {sshd.target}" in errors[0]
    assert "copy the model to the host" in errors[0]


def test_unreachable_host_names_the_host(tmp_path: Path) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(
        'name = "remote"\n[model]\npath = "/models/Qwen3-8B"\n[gpu]\nmemory_gib = 80\n'
        '[engine]\nname = "vllm"\nversion = "0.26.0"\n[host]\ntarget = "ssh://gpu@127.0.0.1:1"\n'
    )
    result = CliRunner().invoke(cli, ["plan", str(spec)])
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "[host] target" in errors[0] and "127.0.0.1" in errors[0]


def test_config_copy_beside_the_spec_is_read_here(tmp_path: Path) -> None:
    """A relative path that exists beside the spec (examples/ ship such copies) needs no connection."""
    _model(tmp_path / "models" / "copy")
    spec = tmp_path / "spec.toml"
    spec.write_text(
        'name = "remote"\n[model]\npath = "models/copy"\n[gpu]\nmemory_gib = 80\n'
        '[engine]\nname = "vllm"\nversion = "0.26.0"\n[host]\ntarget = "ssh://gpu@127.0.0.1:1"\n'
    )
    assert asyncio.run(read_spec_model_files(load_spec(spec))).config["hidden_size"] == 4096
