"""The rows a bench sends: drawn from the job's own prompts, stratified by prompt length.

The rows are sorted by prompt length (characters of every message the target reads) and
cut into `size` strata of equal count; one row is drawn from each with a seeded generator,
and the longest stratum gives its longest row, so the long tail that decides a job's
slowest batches is always in the sample. The same rows, in the same order, go to every
variant. The sample is written as a prompts file `generate` reads (OpenAI messages; a
given assistant turn stays as the empty placeholder that marks where an answer goes).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from specpilot.errors import UserError
from specpilot.generate.rows.inputs import InputSource, iter_rows, resolve_input
from specpilot.generate.rows.types import Message, PromptRow

DEFAULT_SEED = 0


@dataclass(frozen=True)
class Sample:
    """The sampled rows and what they were drawn from."""

    rows: list[PromptRow]
    #: usable rows in the prompts file (the whole input a projection is for)
    input_rows: int
    rejected_rows: int
    seed: int

    @property
    def prompt_chars(self) -> list[int]:
        return [prompt_chars(row) for row in self.rows]


def prompt_chars(row: PromptRow) -> int:
    return sum(len(_text(message)) for segment in row.segments for message in segment)


def _text(message: Message) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def open_prompts(path: Path) -> InputSource:
    """The prompts file as `generate --input` reads it; errors name --prompts."""
    try:
        source = resolve_input(path)
        with source.files[0].open("rb"):
            pass
    except UserError as err:
        raise UserError(err.message, field="--prompts", fix=err.fix) from None
    except OSError as err:
        raise UserError(
            f"cannot read {path}: {err.strerror}", field="--prompts", fix="pass a readable prompts file"
        ) from None
    return source


def draw(source: InputSource, size: int, seed: int = DEFAULT_SEED, fill_to: int = 0) -> Sample:
    """`size` rows stratified by length; a file with fewer usable rows is refused (--sample).
    `fill_to`: at least this many rows where the file has them (a sample that fills the
    engine's running-request cap)."""
    lengths, rejected = _lengths(source)
    if not lengths:
        raise UserError(
            f"{source.path} has no usable prompt rows ({rejected} rejected)",
            field="--prompts",
            fix="pass the job's prompts file (`specpilot generate --help` shows the row shapes)",
        )
    if size > len(lengths):
        raise UserError(
            f"asks for {size} rows but {source.path} has {len(lengths)} usable rows ({rejected} rejected)",
            field="--sample",
            fix=f"pass --sample {len(lengths)} or less, or a larger prompts file",
        )
    size = max(size, min(fill_to, len(lengths)))
    order = _stratified(sorted(lengths), size, random.Random(seed))
    wanted = set(order)
    by_position = {row.position: row for row in iter_rows(source, wanted) if isinstance(row, PromptRow)}
    return Sample([by_position[p] for p in order], len(lengths), rejected, seed)


def _lengths(source: InputSource) -> tuple[list[tuple[int, int]], int]:
    """(prompt characters, position) of every usable row, and how many rows were rejected."""
    lengths: list[tuple[int, int]] = []
    rejected = 0
    try:
        for row in iter_rows(source):
            if isinstance(row, PromptRow):
                lengths.append((prompt_chars(row), row.position))
            else:
                rejected += 1
    except OSError as err:
        raise UserError(
            f"cannot read {source.path}: {err.strerror}",
            field="--prompts",
            fix="pass a readable prompts file",
        ) from None
    return lengths, rejected


def _stratified(lengths: list[tuple[int, int]], size: int, rng: random.Random) -> list[int]:
    """The positions of `size` rows, one drawn from each of `size` equal strata of the rows
    sorted by length (the longest stratum gives its longest row), in a random order."""
    chosen: list[int] = []
    for index in range(size):
        low, high = index * len(lengths) // size, (index + 1) * len(lengths) // size
        pick = high - 1 if index == size - 1 else rng.randrange(low, high)
        chosen.append(lengths[pick][1])
    return rng.sample(chosen, len(chosen))  # short and long rows interleaved, not sorted


def write_prompts(rows: list[PromptRow], path: Path) -> None:
    """The rows as a JSONL prompts file, ids kept."""
    lines = []
    for row in rows:
        messages: list[Message] = []
        for index, segment in enumerate(row.segments):
            if index:
                messages.append({"role": "assistant", "content": ""})
            messages.extend(segment)
        record: dict[str, object] = {"id": row.row_id, "messages": messages}
        if row.tools:
            record["tools"] = row.tools
        lines.append(json.dumps(record, ensure_ascii=False))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
