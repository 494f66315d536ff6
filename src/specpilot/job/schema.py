"""The shape of job.json, checked as it is read: a record edited by hand (or by another tool)
into the wrong shape is one line naming the key, not a crash in the stage that reads it.

Keys the job does not read are kept as they are (`extra="allow"`); the record stays a dict.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, ValidationError

from specpilot.errors import UserError

#: every status a stage can have
StageStatus = Literal["pending", "running", "done", "skipped", "failed"]
STAGE_STATUSES: tuple[StageStatus, ...] = get_args(StageStatus)
_CLASS_NAME = re.compile(r" or instance of _\w+")


#: a job's stages, in the order it runs them (job.json names no other)
StageName = Literal["check", "plan", "bench", "up", "generate", "export", "down"]
STAGES: tuple[StageName, ...] = get_args(StageName)


class _Loose(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class _Stage(_Loose):
    status: StageStatus = "pending"
    started_at: float | None = None
    finished_at: float | None = None
    seen_at: float | None = None
    wall_s: float | None = None
    interrupted_s: float | None = None
    gpu_hours: float | None = None
    gpus: int | None = None
    attempts: int | None = None
    reason: str | None = None
    evidence: dict[str, Any] | None = None
    formats: dict[str, Any] | None = None


class _Prompts(_Loose):
    fingerprint: str | None = None
    sha256: str | None = None
    path: str | None = None


class _Inputs(_Loose):
    serving: str | None = None
    bench: str | None = None
    prompts: _Prompts | None = None
    sampling: str | None = None
    export: str | None = None


class _Record(_Loose):
    job_file: str | None = None
    specpilot_version: str | None = None
    updated_at: float | None = None
    stages: dict[StageName, _Stage] = {}
    inputs: _Inputs | None = None
    server_args: list[str] | None = None
    restarts: list[dict[str, Any]] | None = None
    events: list[dict[str, Any]] | None = None
    projection: dict[str, Any] | None = None
    job: dict[str, Any] | None = None


def read_record(path: Path) -> dict[str, Any]:
    """job.json's content, checked against its shape; refused (UserError) naming the key."""
    fix = "restore it, or give the job a new [job] output folder"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise UserError(f"cannot read {path} ({err})", field="[job] output", fix=fix) from None
    try:
        _Record.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        key = ".".join(str(part) for part in first["loc"] if part != "[key]")
        # pydantic's words without its class names: "Input should be a valid dictionary"
        should = _CLASS_NAME.sub("", first["msg"]).replace("Input should", "should")
        got = json.dumps(first.get("input"))[:60]
        raise UserError(
            f"{path}: {key or 'the record'} {should}, got {got}",
            field="[job] output",
            fix=_fix_of(key, fix),
        ) from None
    assert isinstance(data, dict)  # the model accepts objects only
    return data


def _fix_of(key: str, fix: str) -> str:
    if not key:
        return fix
    if key.startswith("stages.") and key.endswith(".status"):
        return f"set it to one of {', '.join(STAGE_STATUSES)} (pending runs the stage again), or {fix}"
    return f"correct or delete that key (the job fills in what it needs), or {fix}"
