"""The shape of job.json, checked as it is read: a record edited by hand (or by another tool)
into the wrong shape is one line naming the key, not a crash in the stage that reads it.

Keys the job does not read are kept as they are (`extra="allow"`); the record stays a dict.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails

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


class _Exported(_Loose):
    rows: int = 0


class _Stage(_Loose):
    # a number the job adds to or a record it reads back is never null
    status: StageStatus = "pending"
    started_at: float = 0.0
    finished_at: float = 0.0
    seen_at: float = 0.0
    wall_s: float = 0.0
    interrupted_s: float = 0.0
    stalled_s: float = 0.0
    gpu_hours: float = 0.0
    failed_gpu_hours: float = 0.0
    gpus: int = 0
    attempts: int = 0
    reason: str | None = None
    evidence: dict[str, Any] = {}
    formats: dict[str, _Exported] | None = None


class _UpEvidence(_Loose):
    name: str | None = None
    fleet: str | None = None
    pid: int | None = None
    start_ticks: int | None = None


class _BenchEvidence(_Loose):
    spec: str | None = None


class _GenerateEvidence(_Loose):
    completion_tokens: int | None = None
    flagged_completion_tokens: int | None = None
    flagged: int | None = None
    message: str = ""


class _ExportEvidence(_Loose):
    formats: dict[str, _Exported] | None = None


#: what a rerun reads back from a stage's evidence (the others are only written)
_EVIDENCE: dict[str, type[_Loose]] = {
    "up": _UpEvidence,
    "bench": _BenchEvidence,
    "generate": _GenerateEvidence,
    "export": _ExportEvidence,
}


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


class _Restart(_Loose):
    down_s: float = 0.0


class _Yield(_Loose):
    """`yield`, as the job's end summary and its floor read it."""

    rows_total: int
    done: int
    clean: int
    flagged: int
    failed: int
    clean_share: float | None = None
    by_cause: dict[str, int] = {}
    exports: dict[str, int] | None = None


class _YieldGuard(_Loose):
    message: str | None = None


class _MaxTokens(_Loose):
    auto: bool = False
    value: int | None = None


class _Options(_Loose):
    sampling: dict[str, Any] | None = None


class _Record(_Loose):
    job_file: str
    specpilot_version: str | None = None
    updated_at: float | None = None
    stages: dict[StageName, _Stage] = {}
    inputs: _Inputs | None = None
    server_args: list[str] | None = None
    restarts: list[_Restart] = []
    events: list[dict[str, Any]] | None = None
    projection: dict[str, Any] | None = None
    job: _Options = _Options()
    max_tokens: _MaxTokens | None = None
    yield_guard: _YieldGuard | None = None
    # `yield` is a Python keyword: the field under another name
    yields: _Yield | None = Field(default=None, alias="yield")


def read_record(path: Path) -> dict[str, Any]:
    """job.json's content, checked against its shape; refused (UserError) naming the key."""
    fix = "restore it, or give the job a new [job] output folder"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise UserError(f"cannot read {path} ({err})", field="[job] output", fix=fix) from None
    error = _first_error(data)
    if error is not None:
        key = ".".join(str(part) for part in error["loc"] if part != "[key]")
        if error["type"] == "missing":
            raise UserError(f"{path}: {key} is missing", field="[job] output", fix=_fix_of_missing(key, fix))
        # pydantic's words without its class names: "Input should be a valid dictionary"
        should = _CLASS_NAME.sub("", error["msg"]).replace("Input should", "should")
        got = json.dumps(error.get("input"))[:60]
        raise UserError(
            f"{path}: {key or 'the record'} {should}, got {got}",
            field="[job] output",
            fix=_fix_of(key, fix),
        )
    assert isinstance(data, dict)  # the model accepts objects only
    return data


def _first_error(data: object) -> ErrorDetails | None:
    """The record's first departure from its shape, located from its root (None: none)."""
    try:
        _Record.model_validate(data)
    except ValidationError as err:
        return err.errors()[0]
    assert isinstance(data, dict)
    for name, stage in data.get("stages", {}).items():
        model = _EVIDENCE.get(name)
        if model is None:
            continue
        try:
            model.model_validate(stage.get("evidence", {}))
        except ValidationError as err:
            first = err.errors()[0]
            return {**first, "loc": ("stages", name, "evidence", *first["loc"])}
    return None


def _fix_of(key: str, fix: str) -> str:
    if not key:
        return fix
    if key.startswith("stages.") and key.endswith(".status"):
        return f"set it to one of {', '.join(STAGE_STATUSES)} (pending runs the stage again), or {fix}"
    return f"correct or delete that key (the job fills in what it needs), or {fix}"


def _fix_of_missing(key: str, fix: str) -> str:
    if key == "job_file":
        return f'set "job_file" to the path of the job file that began this folder, or {fix}'
    parent = key.rpartition(".")[0]
    return f"write it back, or delete {parent} (the job fills in what it needs), or {fix}"
