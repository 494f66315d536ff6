"""The sampling options `generate` and `bench` share, made from `SamplingInput` (each flag's
type, range and help) and read into one `Sampling`: a value the job file's `[job.sampling]`
refuses is refused here with the same words."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from specpilot.errors import UserError
from specpilot.generate.sampling import SamplingInput, SamplingRefused, described, flag, value_kind


class SamplingValue(click.types.UnprocessedParamType):
    """One sampling key's value, checked by the schema (a usage error, exit 2, in its words).
    (Click's raw-value type as the base: ParamType is generic only from click 8.2.)"""

    def __init__(self, key: str) -> None:
        self.key = key
        self.name = "integer" if value_kind(key) is int else "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return getattr(SamplingInput.read({self.key: value}, typed=False), self.key)
        except SamplingRefused as err:
            self.fail(err.message, param, ctx)


def _option(key: str, help_text: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    help_text = help_text or SamplingInput.model_fields[key].description
    if key == "stop":
        return click.option(flag(key), key, multiple=True, help=f"{help_text} (repeatable)")
    if SamplingInput.model_fields[key].metadata:  # its range
        help_text = f"{help_text} ({described(key)})"
    return click.option(flag(key), key, type=SamplingValue(key), default=None, help=help_text)


def sampling_options(
    *, max_tokens_help: str, thinking_help: str, sampling_seed: bool
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Adds --max-tokens ... --thinking to a command, which then receives `sampling`.
    `sampling_seed`: whether --seed is the requests' sampling seed (bench's own --seed draws
    its sample instead)."""
    keys = [
        key for key in SamplingInput.model_fields if key != "thinking" and (sampling_seed or key != "seed")
    ]
    options = [
        *(_option(key, max_tokens_help if key == "max_tokens" else None) for key in keys),
        click.option(
            "--extra-body",
            default=None,
            metavar="JSON",
            help="More request fields, as a JSON object (e.g. '{\"ignore_eos\": false}'); "
            "not messages, model or stream; chat_template_kwargs.enable_thinking is --thinking's.",
        ),
        click.option("--thinking/--no-thinking", default=True, show_default=True, help=thinking_help),
    ]

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(command)
        def read(*args: Any, **kwargs: Any) -> Any:
            given = {key: kwargs.pop(key) for key in [*keys, "thinking"]}
            given["stop"] = list(given["stop"]) or None
            values = SamplingInput.read({k: v for k, v in given.items() if v is not None}, typed=False)
            fields = request_fields(kwargs.pop("extra_body"), values.request_fields())
            return command(*args, sampling=values.sampling(fields), **kwargs)

        for option in reversed(options):
            read = option(read)
        return read

    return decorate


def request_fields(extra_body_json: str | None, given: dict[str, object]) -> dict[str, object]:
    """The request fields besides the sampling basics: --extra-body's, then the flags `given`
    (`SamplingInput.request_fields`: none None); a field set by both is refused (which one was
    meant?)."""
    from specpilot.generate.dispatch.client import extra_body

    fields = extra_body(extra_body_json) if extra_body_json is not None else {}
    both = sorted(set(fields) & set(given))
    if both:
        option = flag(both[0])
        raise UserError(
            f"sets {both[0]}, which {option} also sets",
            field="--extra-body",
            fix=f"give it once: drop it or {option}",
        )
    return {**fields, **given}
