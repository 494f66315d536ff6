"""The sampling options `generate` and `bench` share, read into one `Sampling`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from specpilot.cli.params import FiniteFloat
from specpilot.errors import UserError
from specpilot.generate.sampling import Sampling

#: the options whose values go into `Sampling.request_fields` (option dest -> request field)
_FIELD_OPTIONS = {
    "min_p": "min_p",
    "seed": "seed",
    "stops": "stop",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "repetition_penalty": "repetition_penalty",
}


def sampling_options(
    *, max_tokens_help: str, thinking_help: str, sampling_seed: bool
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Adds --max-tokens ... --thinking to a command, which then receives `sampling`.
    `sampling_seed`: whether --seed is the requests' sampling seed (bench's own --seed draws
    its sample instead)."""
    options = [
        click.option("--max-tokens", type=click.IntRange(1), default=None, help=max_tokens_help),
        click.option("--temperature", type=FiniteFloat(0), default=None),
        click.option("--top-p", type=FiniteFloat(0, 1), default=None),
        click.option("--top-k", type=int, default=None),
        click.option("--min-p", type=FiniteFloat(0, 1), default=None),
        *(
            [
                click.option(
                    "--seed",
                    type=int,
                    default=None,
                    help="Sampling seed (SGLang and vLLM honour it per request).",
                )
            ]
            if sampling_seed
            else []
        ),
        click.option("--stop", "stops", multiple=True, help="A stop string (repeatable)."),
        click.option("--presence-penalty", type=FiniteFloat(-2, 2), default=None),
        click.option("--frequency-penalty", type=FiniteFloat(-2, 2), default=None),
        click.option("--repetition-penalty", type=FiniteFloat(0, min_open=True), default=None),
        click.option(
            "--extra-body",
            default=None,
            metavar="JSON",
            help="More request fields, as a JSON object (e.g. '{\"ignore_eos\": false}'); "
            "not messages, model or stream; chat_template_kwargs.enable_thinking is --thinking's.",
        ),
        click.option("--thinking/--no-thinking", default=True, show_default=True, help=thinking_help),
    ]
    own = [name for name in _FIELD_OPTIONS if sampling_seed or name != "seed"]

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(command)
        def read(*args: Any, **kwargs: Any) -> Any:
            flags = {_FIELD_OPTIONS[name]: kwargs.pop(name) for name in own}
            flags["stop"] = list(flags["stop"]) or None
            sampling = Sampling(
                thinking=kwargs.pop("thinking"),
                max_tokens=kwargs.pop("max_tokens"),
                temperature=kwargs.pop("temperature"),
                top_p=kwargs.pop("top_p"),
                top_k=kwargs.pop("top_k"),
                request_fields=request_fields(kwargs.pop("extra_body"), flags),
            )
            return command(*args, sampling=sampling, **kwargs)

        for option in reversed(options):
            read = option(read)
        return read

    return decorate


def request_fields(extra_body_json: str | None, flags: dict[str, object]) -> dict[str, object]:
    """The request fields besides the sampling basics: --extra-body's, then the flags given;
    a field set by both is refused (which one was meant?)."""
    from specpilot.generate.dispatch.client import extra_body

    fields = extra_body(extra_body_json) if extra_body_json is not None else {}
    given = {key: value for key, value in flags.items() if value is not None}
    both = sorted(set(fields) & set(given))
    if both:
        flag = "--" + both[0].replace("_", "-")
        raise UserError(
            f"sets {both[0]}, which {flag} also sets",
            field="--extra-body",
            fix=f"give it once: drop it or {flag}",
        )
    return {**fields, **given}
