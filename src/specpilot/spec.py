"""The spec: one TOML file that says which model, GPU, engine, flags and host.

The engine's own flags stay the engine's own (`[engine] args`): specpilot reads
them rather than inventing a parallel vocabulary, so a pasted launch command and
a spec file mean the same thing (`spec_from_command`).

Every validation error is one line naming the TOML key and the fix, and
an unknown key names the closest valid one: a typo must never be silently ignored.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from specpilot.cmdline import parse_launch_command, split_model
from specpilot.dtypes import DTYPE_BYTES
from specpilot.engines.registry import engine_names, engine_release, spoken_names
from specpilot.errors import UserError
from specpilot.secrets import mask_argv


def _registered_engine(value: object) -> object:
    """A registered engine's name, said as pydantic says a literal's choices (before the str check,
    so a number is refused with the same words)."""
    names = engine_names()
    if value not in names:
        raise ValueError(f"Input should be {spoken_names(names, chr(39))}")
    return value


#: the name of an engine in `engines.registry.ENGINES`
EngineName = Annotated[str, BeforeValidator(_registered_engine)]

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


#: quantization methods whose weight size the planners know (vLLM's and SGLang's spellings)
QUANTIZATION_METHODS = frozenset(
    {"fp8", "modelopt", "modelopt_fp4", "nvfp4", "mxfp4", "awq", "awq_marlin", "gptq", "gptq_marlin",
     "auto_round", "compressed-tensors", "bitsandbytes", "w8a8_int8", "w8a8_fp8"}
)  # fmt: skip


class _Section(BaseModel):
    # inf and nan are valid TOML floats; no GPU has inf GiB (and nan passes every `gt`)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ModelSection(_Section):
    """`[model]`: where the model's config.json lives and how its weights are stored."""

    path: str = Field(
        description="Directory holding config.json (weights optional), a config.json path, or a Hub id."
    )
    dtype: str = Field("bfloat16", description="Weights dtype: bfloat16, float16, float32, fp8.")
    quantization: str | None = Field(None, description="Quantization method, e.g. fp8; None for none.")
    weights_gib: float | None = Field(
        None,
        gt=0,
        description="Measured weight memory per GPU (GiB) from an engine log; overrides estimate.",
    )
    served_name: str | None = Field(None, description="Name the server reports in /v1/models.")

    @field_validator("dtype")
    @classmethod
    def _known_dtype(cls, value: str) -> str:
        if value not in DTYPE_BYTES:
            raise ValueError("unknown dtype; use bfloat16, float16, float32 or fp8")
        return value

    @field_validator("quantization")
    @classmethod
    def _known_quantization(cls, value: str | None) -> str | None:
        if value is not None and value not in QUANTIZATION_METHODS:
            raise ValueError(
                f"unknown quantization method; use one of {', '.join(sorted(QUANTIZATION_METHODS))}"
            )
        return value


class GpuSection(_Section):
    """`[gpu]`: the card, as the driver reports it."""

    memory_gib: float = Field(gt=0, description="Total memory per GPU in GiB, as nvidia-smi reports it.")
    count: int = Field(1, ge=1, description="GPUs the server uses.")
    name: str | None = Field(None, description="GPU model, e.g. H200 (informational).")
    free_before_load_gib: float | None = Field(
        None, gt=0, description="Measured free memory (GiB) the engine saw before loading weights."
    )

    @field_validator("free_before_load_gib")
    @classmethod
    def _free_within_total(cls, value: float | None, info: ValidationInfo) -> float | None:
        total = info.data.get("memory_gib")
        if value is not None and total is not None and value > total:
            raise ValueError(f"more than memory_gib ({total:g}): free memory cannot exceed the card's total")
        return value


class EngineSection(_Section):
    """`[engine]`: which engine, which release, and its flags exactly as typed."""

    name: EngineName
    version: str = Field(description="Engine release, e.g. 0.5.13 or 0.26.0.")
    args: list[str] = Field(default_factory=list, description="The engine's own flags.")
    env: dict[str, str] = Field(default_factory=dict, description="Environment variables for the engine.")
    command: list[str] | None = Field(
        None,
        description="Program to start instead of the engine's default (a venv python, a wrapper).",
    )

    @field_validator("version")
    @classmethod
    def _version_is_a_release(cls, value: str) -> str:
        from packaging.version import InvalidVersion, Version

        try:
            Version(value)
        except InvalidVersion:
            raise ValueError(f"{value!r} is not a release number (write it like 0.5.13)") from None
        return value


class HostSection(_Section):
    """`[host]`: where the server runs."""

    target: str = Field("local", description='"local", "ssh://user@host:port", or an ~/.ssh/config alias.')
    identity_file: str | None = None
    known_hosts: str | None = None
    ssh_config: str | None = None
    accept_new_host_key: bool = False


class ServerSection(_Section):
    """`[server]`: the address the engine listens on and how long to wait for it."""

    host: str = "127.0.0.1"
    port: int = Field(30000, ge=1, le=65535)
    ready_timeout_s: float = Field(1800.0, gt=0)
    hang_timeout_s: float = Field(600.0, gt=0)


class Spec(_Section):
    """A whole spec file."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    model: ModelSection
    gpu: GpuSection
    engine: EngineSection
    host: HostSection = Field(default_factory=HostSection)
    server: ServerSection = Field(default_factory=ServerSection)
    source_path: Path | None = Field(None, exclude=True)

    def model_dir(self) -> Path:
        """The model path, relative paths taken from the spec file's folder."""
        path = Path(self.model.path).expanduser()
        if not path.is_absolute() and self.source_path is not None:
            path = self.source_path.parent / path
        return path


def _location(loc: tuple[int | str, ...]) -> str:
    """`("gpu", "memory_gib")` -> `[gpu] memory_gib`; top-level keys stay bare."""
    parts = [str(p) for p in loc]
    if len(parts) >= 2 and parts[0] in _SECTIONS:
        return f"[{parts[0]}] {'.'.join(parts[1:])}"
    return ".".join(parts)


_SECTIONS: dict[str, type[_Section]] = {
    "model": ModelSection,
    "gpu": GpuSection,
    "engine": EngineSection,
    "host": HostSection,
    "server": ServerSection,
}


def _valid_keys(loc: tuple[int | str, ...]) -> list[str]:
    model: type[_Section] = Spec
    if len(loc) >= 2 and loc[0] in _SECTIONS:
        model = _SECTIONS[str(loc[0])]
    return [k for k in model.model_fields if k != "source_path"]


def _first_error(err: ValidationError, origin: str) -> UserError:
    """Pydantic's error list -> one line naming the key and what to do."""
    # A typo shows up twice (unknown key + missing key); the unknown key is the cause.
    first = sorted(err.errors(), key=lambda e: e["type"] != "extra_forbidden")[0]
    loc = tuple(first["loc"])
    where = f"{origin}: {_location(loc)}"
    kind = first["type"]
    if kind == "extra_forbidden":
        key = str(loc[-1])
        close = difflib.get_close_matches(key, _valid_keys(loc), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"valid keys: {', '.join(_valid_keys(loc))}"
        return UserError("unknown key", field=where, fix=hint)
    if kind == "missing":
        return UserError(
            "missing required key",
            field=where,
            fix="add it to the spec; see the README's spec reference",
        )
    message = str(first["msg"]).removeprefix("Value error, ")
    return UserError(
        f"{message} (got {_shown_input(loc, first.get('input'))})",
        field=where,
        fix="see the README's spec reference for this key",
    )


#: a TOML value's type as a refusal says it (not Python's "a int", "a dict")
_TOML_KINDS: dict[type, str] = {
    int: "a whole number",
    float: "a number",
    bool: "a boolean",
    list: "an array",
    dict: "a table",
}


def _shown_input(loc: tuple[int | str, ...], value: object) -> str:
    """The offending value for an error line, unless it may hold a secret (env values, args)."""

    if loc[:2] == ("engine", "env"):
        kind = _TOML_KINDS.get(type(value), f"a {type(value).__name__}")
        return f"{kind}; the value is not shown as it may hold a secret"
    if loc[:2] == ("engine", "args") and isinstance(value, list):
        return repr(mask_argv([str(item) for item in value]))
    return repr(value)


def parse_spec(data: dict[str, Any], *, origin: str = "spec", source_path: Path | None = None) -> Spec:
    """Validate a spec given as a dict (a parsed TOML document)."""
    try:
        spec = Spec.model_validate(data)
    except ValidationError as err:
        raise _first_error(err, origin) from None
    _refuse_model_in_args(spec, origin)
    return spec.model_copy(update={"source_path": source_path})


def _refuse_model_in_args(spec: Spec, origin: str) -> None:
    """The model lives in `[model] path` only: two sources of truth would disagree one day."""

    model, _ = split_model(engine_release(spec.engine.name, spec.engine.version), spec.engine.args)
    if model is not None:
        raise UserError(
            f"names the model ({model!r}) a second time",
            field=f"{origin}: [engine] args",
            fix="remove it from args and keep it in [model] path",
        )


def load_spec(path: str | Path) -> Spec:
    """Read and validate a spec file."""
    spec_path = Path(path)
    if not spec_path.is_file():
        raise UserError(
            "no such file",
            field=str(spec_path),
            fix="pass the path of a spec .toml (see examples/)",
        )
    try:
        data = tomllib.loads(spec_path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise UserError(
            f"not valid TOML: {err}",
            field=str(spec_path),
            fix="fix the syntax at that line: one key = value per line, strings in quotes",
        ) from None
    except UnicodeDecodeError:
        raise UserError(
            "not a UTF-8 text file", field=str(spec_path), fix="save the spec as UTF-8 text"
        ) from None
    except RecursionError:
        raise UserError(
            "not valid TOML: arrays or tables nested too deeply to read",
            field=str(spec_path),
            fix="a spec needs no nesting beyond [section] key = value; remove the nested value",
        ) from None
    return parse_spec(data, origin=str(spec_path), source_path=spec_path.resolve())


def spec_to_toml(spec: Spec) -> str:
    """The spec as TOML text, for the run directory (round-trips through `parse_spec`)."""
    import tomli_w

    return tomli_w.dumps(spec.model_dump(exclude_none=True, exclude={"source_path"}))


def spec_from_command(
    tokens: list[str],
    *,
    gpu_memory_gib: float | None,
    gpu_count: int | None = None,
    engine_version: str | None = None,
    name: str = "pasted",
) -> Spec:
    """A spec from a pasted launch command (see `specpilot.cmdline`)."""

    pasted = parse_launch_command(tokens)
    if gpu_memory_gib is None:
        raise UserError(
            "a pasted command does not say how much GPU memory there is",
            field="--gpu-memory-gib",
            fix="add e.g. --gpu-memory-gib 95.6 (total per GPU, as nvidia-smi reports it)",
        )
    version = engine_version or pasted.default_version
    data: dict[str, Any] = {
        "name": name,
        "model": {"path": pasted.model_path},
        "gpu": {"memory_gib": gpu_memory_gib, "count": gpu_count or pasted.gpu_count},
        "engine": {
            "name": pasted.engine,
            "version": version,
            "args": pasted.args,
            "env": pasted.env,
        },
    }
    return parse_spec(data, origin="pasted command")
