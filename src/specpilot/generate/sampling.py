"""The sampling a user asks of a job: one type from the options (`generate`, `bench`, the job
file) through the job's config and the ledger's parameters to each request's body.

`generate` sends it (with the model, `request_body`) and `bench` measures with it: a bench on
other sampling than the job's (another output length, penalties, stop strings) measures
another job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specpilot.secrets import mask_fields


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
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            **({"request_fields": mask_fields(dict(self.request_fields))} if self.request_fields else {}),
        }

    def request_body(self, model: str) -> dict[str, Any]:
        """What each request sends besides the messages; `None` values are left to the server."""
        body: dict[str, Any] = {"model": model}
        for key in ("max_tokens", "temperature", "top_p", "top_k"):
            if getattr(self, key) is not None:
                body[key] = getattr(self, key)
        body["chat_template_kwargs"] = {"enable_thinking": self.thinking}
        for key, value in self.request_fields.items():
            if key == "chat_template_kwargs" and isinstance(value, dict):
                body[key] = {**value, **body[key]}  # enable_thinking stays --thinking's
            else:
                body[key] = value
        return body
