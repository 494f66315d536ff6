"""The model's tokenizer and chat template, read from a local model folder, for the train-ready check.

`transformers`' AutoTokenizer where it is importable (what SpecForge and speculators load),
else `tokenizers` on `tokenizer.json` with the chat template rendered by jinja2 as
transformers renders it (a sandbox with `trim_blocks`, `lstrip_blocks`, loop controls,
`tojson` and `raise_exception`). Neither is a dependency of specpilot: without them the
check is skipped and says why (`Unreadable`).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

#: files that make a folder a tokenizer's
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


class Unreadable(Exception):
    """No tokenizer can be read: the check is skipped, with this as its reason."""


@dataclass(frozen=True)
class ChatTokenizer:
    """Renders a conversation with the model's chat template and counts the tokens of text."""

    where: Path
    #: render(messages, tools, add_generation_prompt, template kwargs) -> text
    render: Callable[[list[dict[str, Any]], list[Any] | None, bool, dict[str, Any]], str]
    count: Callable[[str], int]
    library: str


def is_tokenizer_folder(path: Path) -> bool:
    return path.is_dir() and any((path / name).is_file() for name in TOKENIZER_FILES)


def load_tokenizer(folder: Path) -> ChatTokenizer:
    """The tokenizer of `folder` (a model folder), or `Unreadable` saying why not."""
    if importlib.util.find_spec("transformers") is not None:
        return _with_transformers(folder)
    if importlib.util.find_spec("tokenizers") is None or importlib.util.find_spec("jinja2") is None:
        raise Unreadable(
            "neither transformers nor tokenizers and jinja2 is installed (pip install tokenizers)"
        )
    return _with_tokenizers(folder)


def _with_transformers(folder: Path) -> ChatTokenizer:
    from transformers import AutoTokenizer  # type: ignore[import-not-found, unused-ignore]

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError) as err:
        raise Unreadable(f"transformers cannot load the tokenizer in {folder}: {err}") from None
    if not getattr(tokenizer, "chat_template", None):
        raise Unreadable(f"the tokenizer in {folder} has no chat template")

    def render(
        messages: list[dict[str, Any]], tools: list[Any] | None, prompt: bool, kwargs: dict[str, Any]
    ) -> str:
        text = tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=prompt, **kwargs
        )
        return str(text)

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    return ChatTokenizer(folder, render, count, "transformers")


def _with_tokenizers(folder: Path) -> ChatTokenizer:
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    except Exception as err:  # the Rust side raises its own exception type
        raise Unreadable(f"cannot read {folder / 'tokenizer.json'}: {err}") from None
    config = _json_file(folder / "tokenizer_config.json")
    source = _chat_template(folder, config)
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        template = env.from_string(source)
    except TemplateError as err:
        raise Unreadable(f"the chat template in {folder} does not parse: {err}") from None
    special = {
        key: _token_text(config.get(key)) for key in ("bos_token", "eos_token", "pad_token", "unk_token")
    }

    def render(
        messages: list[dict[str, Any]], tools: list[Any] | None, prompt: bool, kwargs: dict[str, Any]
    ) -> str:
        context = {**special, **kwargs, "messages": messages, "tools": tools, "add_generation_prompt": prompt}
        return template.render(**context)

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    return ChatTokenizer(folder, render, count, "tokenizers")


def _json_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise Unreadable(f"cannot read {path}: {err}") from None
    return data if isinstance(data, dict) else {}


def _chat_template(folder: Path, config: dict[str, Any]) -> str:
    """chat_template.jinja (what transformers saves since 4.43), else tokenizer_config.json's
    chat_template: a string, or a list of named ones of which "default" is the one used."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    found = config.get("chat_template")
    if isinstance(found, list):
        found = next(
            (t.get("template") for t in found if isinstance(t, dict) and t.get("name") == "default"), None
        )
    if not isinstance(found, str) or not found:
        raise Unreadable(f"the tokenizer in {folder} has no chat template")
    return found


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: text, or {"content": text, ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: Any = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _raise(message: str) -> NoReturn:
    from jinja2 import TemplateError

    raise TemplateError(message)
