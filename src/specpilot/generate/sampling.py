"""The sampling a user asks of a job: one type from the options (`generate`, `bench`, the job
file) through the job's config and the ledger's parameters to each request's body.

`SamplingInput` is the one schema of the keys a user gives (each key's name, type, range and
help): `generate`'s and `bench`'s flags are made from it (`cli/sampling.py`) and `[job.sampling]`
is read through it (`job/spec.py`), so a value is refused with the same words in both.
`Sampling` is what the job then sends.

`generate` sends it (with the model, `request_body`) and `bench` measures with it: a bench on
other sampling than the job's (another output length, penalties, stop strings) measures
another job.
"""

from __future__ import annotations

import json
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self, Union, get_args, get_origin

from annotated_types import Ge, Gt, Le
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specpilot.secrets import mask_fields

#: the keys `Sampling` holds as its own (sent when given); the others besides `thinking` are
#: request fields
NAMED_KEYS = ("max_tokens", "temperature", "top_p", "top_k")


@dataclass(frozen=True)
class Sampling:
    #: chat_template_kwargs.enable_thinking
    thinking: bool
    #: None: the server's default (each is sent only when given)
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    #: every other request field: --extra-body's, then min_p, stop, penalties, seed as given
    request_fields: Mapping[str, object] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {
            "thinking": self.thinking,
            **{key: getattr(self, key) for key in NAMED_KEYS},
            **({"request_fields": mask_fields(dict(self.request_fields))} if self.request_fields else {}),
        }

    def request_body(self, model: str) -> dict[str, Any]:
        """What each request sends besides the messages; `None` values are left to the server."""
        body: dict[str, Any] = {"model": model}
        for key in NAMED_KEYS:
            if getattr(self, key) is not None:
                body[key] = getattr(self, key)
        body["chat_template_kwargs"] = {"enable_thinking": self.thinking}
        for key, value in self.request_fields.items():
            if key == "chat_template_kwargs" and isinstance(value, dict):
                body[key] = {**value, **body[key]}  # enable_thinking stays --thinking's
            else:
                body[key] = value
        return body


class SamplingRefused(ValueError):
    """A value of the wrong type or out of range; `message` names neither flag nor key (the
    command line and the job file each name theirs)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


class SamplingInput(BaseModel):
    """The sampling keys as a user gives them: flags by these names (`--top-p`), job-file keys as
    they are (`top_p`); None: not given (the server's default)."""

    # inf and nan are valid TOML floats and parse as floats from a command line: never a setting
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    thinking: bool = Field(True, description="chat_template_kwargs.enable_thinking.")
    max_tokens: int | None = Field(None, ge=1, description="Most tokens per answer.")
    temperature: float | None = Field(None, ge=0, description="Sampling temperature.")
    top_p: float | None = Field(None, ge=0, le=1, description="Nucleus sampling: the probability mass kept.")
    top_k: int | None = Field(None, description="Sample among the k likeliest tokens (-1: all).")
    min_p: float | None = Field(
        None, ge=0, le=1, description="Least probability of a token, relative to the likeliest one."
    )
    seed: int | None = Field(None, description="Sampling seed (SGLang and vLLM honour it per request).")
    stop: list[str] | None = Field(None, description="Stop strings: an answer ends at the first it writes.")
    presence_penalty: float | None = Field(
        None, ge=-2, le=2, description="Penalty on tokens already in the text."
    )
    frequency_penalty: float | None = Field(
        None, ge=-2, le=2, description="Penalty by how often a token is already in the text."
    )
    repetition_penalty: float | None = Field(
        None, gt=0, description="Multiplier on repeated tokens' probability (1: none)."
    )

    @classmethod
    def read(cls, values: Mapping[str, object], *, typed: bool) -> Self:
        """`values` validated: `typed` as a TOML file gives them (a number must be a number), else
        as text from a command line. The first bad value raises `SamplingRefused`."""
        try:
            return cls.model_validate(values, strict=typed)
        except ValidationError as err:
            first = err.errors()[0]
            key = str(first["loc"][0])
            raise SamplingRefused(key, _problem(key, first["type"], values.get(key), typed)) from None

    def request_fields(self) -> dict[str, object]:
        """The request fields given (min_p, seed, stop, the penalties), in the schema's order."""
        given = {key: getattr(self, key) for key in request_field_keys()}
        return {key: value for key, value in given.items() if value is not None}

    def sampling(self, request_fields: Mapping[str, object]) -> Sampling:
        named = {key: getattr(self, key) for key in NAMED_KEYS}
        return Sampling(thinking=self.thinking, **named, request_fields=dict(request_fields))


def flag(key: str) -> str:
    """`key` as a command line spells it: top_p is --top-p."""
    return "--" + key.replace("_", "-")


def request_field_keys() -> tuple[str, ...]:
    return tuple(key for key in SamplingInput.model_fields if key not in ("thinking", *NAMED_KEYS))


def value_kind(key: str) -> type:
    """The type of `key`'s value (int, float, bool or list), None left out."""
    annotation = SamplingInput.model_fields[key].annotation
    if get_origin(annotation) in (Union, types.UnionType):
        annotation = next(arg for arg in get_args(annotation) if arg is not type(None))
    kind = get_origin(annotation) or annotation
    assert isinstance(kind, type)
    return kind


#: what a value of each kind is called in a message
_KIND_NAMES = {int: "a whole number", float: "a number", bool: "true or false", list: "a list of strings"}


def described(key: str) -> str:
    """What `key` takes, its range included: "a number from 0 to 1"."""
    low, high, above = _bounds(key)
    within = (
        f" from {low} to {high}" if low is not None and high is not None
        else f" of at least {low}" if low is not None
        else f" above {above}" if above is not None
        else ""
    )  # fmt: skip
    return _KIND_NAMES[value_kind(key)] + within


def _bounds(key: str) -> tuple[str | None, str | None, str | None]:
    """`key`'s least value, its greatest, and the value it must be above, as a message writes them."""
    bounds = SamplingInput.model_fields[key].metadata
    low = next((f"{b.ge:g}" for b in bounds if isinstance(b, Ge)), None)
    high = next((f"{b.le:g}" for b in bounds if isinstance(b, Le)), None)
    above = next((f"{b.gt:g}" for b in bounds if isinstance(b, Gt)), None)
    return low, high, above


def _problem(key: str, error: str, value: object, typed: bool) -> str:
    if error == "extra_forbidden":
        return "unknown key"
    if error == "finite_number":
        return f"{_shown(value, typed)} is not a finite number; give {described(key)}"
    return f"must be {described(key)}, got {_shown(value, typed)}"


def _shown(value: object, typed: bool) -> str:
    """`value` as the user wrote it: text from a command line that reads as a number as typed
    (`--top-p 5` and `top_p = 5` both show 5), other text quoted."""
    if isinstance(value, str):
        return value if not typed and _reads_as_number(value) else repr(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return repr(value)  # nan and inf as Python and TOML write them
    return json.dumps(value, default=str)


def _reads_as_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
