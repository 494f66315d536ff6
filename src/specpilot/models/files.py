"""The files a model shape is read from: config.json and the safetensors headers.

Read where the engine will read them: on this machine for a local run, on the
host for a remote one (through the host layer, so `plan`, `check` and `up` see
the model the engine gets, not a copy on the laptop). Only the JSON header of a
safetensors file is read (8-byte length, then the header), so 50 GB of weights
cost a few kilobytes.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specpilot.errors import UserError

#: a safetensors header longer than this is not a header (the format caps it at 100 MB)
MAX_HEADER_BYTES = 100 * 1024 * 1024


@dataclass(frozen=True)
class ModelFiles:
    """What was read, and where (for messages)."""

    config: dict[str, Any]
    safetensors_headers: tuple[dict[str, Any], ...]
    where: str


def parse_config(data: bytes, where: str) -> dict[str, Any]:
    """config.json bytes -> a dict, or a one-line error naming where it was read."""
    try:
        config = json.loads(data.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserError(
            f"{where} is not valid JSON ({err})",
            field="[model] path",
            fix="use the model's own config.json, unedited",
        ) from None
    if not isinstance(config, dict):
        raise UserError(
            f"{where} is not a JSON object",
            field="[model] path",
            fix="use the model's own config.json, unedited",
        )
    return config


def header_length(prefix: bytes, where: str) -> int:
    """The header length a safetensors file starts with (little-endian u64)."""
    if len(prefix) < 8:
        raise UserError(
            f"{where} is shorter than a safetensors header", field="[model] path", fix=_WEIGHTS_FIX
        )
    (length,) = struct.unpack("<Q", prefix[:8])
    if length > MAX_HEADER_BYTES:
        raise UserError(f"{where} is not a safetensors file", field="[model] path", fix=_WEIGHTS_FIX)
    return int(length)


def parse_header(data: bytes, where: str) -> dict[str, Any]:
    try:
        header = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UserError(f"{where} has a damaged header", field="[model] path", fix=_WEIGHTS_FIX) from None
    if not isinstance(header, dict):
        raise UserError(f"{where} has a damaged header", field="[model] path", fix=_WEIGHTS_FIX)
    return header


_WEIGHTS_FIX = "re-download the weights (a truncated copy?), or move non-weight files out of the folder"


def read_local_model(model_path: Path) -> ModelFiles:
    """A model directory (or a config.json path) on this machine."""
    if model_path.is_file():
        config_file, weights_dir = model_path, model_path.parent
    else:
        config_file, weights_dir = model_path / "config.json", model_path
    if not config_file.is_file():
        raise UserError(
            f"no config.json at {config_file}",
            field="[model] path",
            fix="point [model] path at a directory holding the model's config.json",
        )
    config = parse_config(config_file.read_bytes(), str(config_file))
    headers = []
    for file in sorted(weights_dir.glob("*.safetensors")):
        with file.open("rb") as handle:
            length = header_length(handle.read(8), str(file))
            headers.append(parse_header(handle.read(length), str(file)))
    return ModelFiles(config=config, safetensors_headers=tuple(headers), where=str(config_file))
