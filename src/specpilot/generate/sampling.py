"""The sampling a user asks of a job, as `generate` and `bench` read it from their options.

`generate` sends it (with the model, as `generate.client.Sampling`) and `bench` measures with
it: a bench on other sampling than the job's (another output length, penalties, stop
strings) measures another job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from specpilot.secrets import mask_fields


@dataclass(frozen=True)
class SamplingOptions:
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
