"""Reading prompt rows from JSONL, Parquet or a saved Hugging Face `datasets` directory.

Accepted row shapes (the first key present wins):

* `{"id", "conversations": [...]}`: SpecForge's form; ShareGPT's `{"from", "value"}`
  turns are mapped to `{"role", "content"}`. Trailing assistant turns are dropped: the
  job regenerates the final answer with the target model, which is the whole point of
  drafter data.
* `{"id", "messages": [...]}`: OpenAI chat messages, same trimming.
* `{"id", "prompt": "..."}`: one user turn.

`id` is optional; without it `ids.derive_row_id` gives a content id. Each row also has a
*position* (its ordinal among non-blank rows) which the ledger stores: on resume only the
positions still pending are parsed, so skipping 500k finished JSONL rows costs a line
scan, not 500k `json.loads`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Container, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specpilot.errors import UserError
from specpilot.generate.ids import derive_row_id
from specpilot.generate.types import Message, PromptRow

PROMPT_KEYS = ("conversations", "messages", "prompt")
SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "system": "system",
    "tool": "tool",
}
ARROW_BATCH_ROWS = 4096
HASH_CHUNK_BYTES = 1 << 20
#: a JSONL line longer than this is refused rather than read whole into memory
MAX_LINE_BYTES = 256 << 20


@dataclass(frozen=True)
class InputSource:
    """A resolved input: its format and the files that hold its rows, in order."""

    path: Path
    kind: str  # "jsonl" | "parquet" | "hf-datasets"
    files: tuple[Path, ...]

    def fingerprint(self) -> str:
        """Cheap identity (names, sizes, mtimes) that lets a resume skip re-hashing."""
        parts = []
        for file in self.files:
            stat = file.stat()
            parts.append(f"{file.resolve()}:{stat.st_size}:{stat.st_mtime_ns}")
        return "|".join(parts)

    def sha256(self) -> str:
        """Hash of the bytes of every input file, in order (recorded in the manifest)."""
        digest = hashlib.sha256()
        for file in self.files:
            with file.open("rb") as handle:
                while chunk := handle.read(HASH_CHUNK_BYTES):
                    digest.update(chunk)
        return digest.hexdigest()


def resolve_input(path: Path) -> InputSource:
    """Find the format of `path`; UserError if it is missing or unrecognised."""
    if not path.exists():
        raise UserError(
            f"{path} does not exist",
            field="--input",
            fix="pass a .jsonl, .parquet or a datasets save_to_disk directory",
        )
    if path.is_dir():
        return InputSource(path, "hf-datasets", _hf_arrow_files(path))
    if not path.is_file():
        # /dev/zero, a FIFO or a socket: endless or read-once, so neither hashable nor resumable
        raise UserError(
            f"{path} is not a regular file",
            field="--input",
            fix="save the prompts to a .jsonl or .parquet file and pass that",
        )
    if path.suffix == ".parquet":
        return InputSource(path, "parquet", (path,))
    return InputSource(path, "jsonl", (path,))


def _hf_arrow_files(directory: Path) -> tuple[Path, ...]:
    """The arrow shards of a `Dataset.save_to_disk` directory (one split)."""
    splits_file = directory / "dataset_dict.json"
    if splits_file.exists():
        splits = _json_field(splits_file, "splits")
        if len(splits) == 1:
            return _hf_arrow_files(directory / str(splits[0]))
        example = directory / str((splits or ["train"])[0])
        raise UserError(
            f"{directory} holds several splits {splits}",
            field="--input",
            fix=f"pass one split directory, e.g. {example}",
        )
    state_file = directory / "state.json"
    if not state_file.exists():
        raise UserError(
            f"{directory} is not a saved datasets directory (no state.json)",
            field="--input",
            fix="save it with Dataset.save_to_disk(DIR)",
        )
    entries = _json_field(state_file, "_data_files")
    if not all(isinstance(entry, dict) and isinstance(entry.get("filename"), str) for entry in entries):
        raise _unreadable_dataset(state_file, "an entry of _data_files has no filename")
    return tuple(directory / entry["filename"] for entry in entries)


def _json_field(path: Path, key: str) -> list[Any]:
    """`key` of the JSON object in `path`, which must be a list."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as err:
        raise _unreadable_dataset(path, str(err)) from None
    value = data.get(key) if isinstance(data, dict) else None
    if not isinstance(value, list):
        raise _unreadable_dataset(path, f"no list {key!r}")
    return value


def _unreadable_dataset(path: Path, why: str) -> UserError:
    return UserError(
        f"{path} cannot be read ({why})",
        field="--input",
        fix="save the dataset again with Dataset.save_to_disk(DIR), or pass a .jsonl file",
    )


def iter_rows(source: InputSource, positions: Container[int] | None = None) -> Iterator[PromptRow]:
    """Yield rows in input order; with `positions`, only rows at those positions."""
    if source.kind == "jsonl":
        yield from _iter_jsonl(source.files[0], positions)
    else:
        yield from _iter_arrow(source, positions)


def _iter_jsonl(path: Path, positions: Container[int] | None) -> Iterator[PromptRow]:
    position = 0
    with path.open("rb") as handle:
        for line_number, raw in enumerate(iter(lambda: handle.readline(MAX_LINE_BYTES + 1), b""), start=1):
            if len(raw) > MAX_LINE_BYTES:
                raise UserError(
                    f"line {line_number} is longer than {MAX_LINE_BYTES:,} bytes",
                    field=f"{path}:{line_number}",
                    fix="check the file is JSONL (one prompt per line); split or shorten that row",
                )
            if not raw.strip():
                continue
            if positions is None or position in positions:
                try:
                    record = json.loads(raw)
                except (ValueError, RecursionError) as err:
                    raise UserError(
                        f"line {line_number} is not valid JSON ({err.args[0]})",
                        field=f"{path}:{line_number}",
                        fix="fix or delete that line; each line must be one JSON object",
                    ) from None
                yield row_from_record(record, position, f"{path}:{line_number}")
            position += 1


def _iter_arrow(source: InputSource, positions: Container[int] | None) -> Iterator[PromptRow]:
    import pyarrow as pa

    try:
        yield from _iter_arrow_files(source, positions)
    except (pa.ArrowException, OSError) as err:
        raise UserError(
            f"{source.path} cannot be read as {source.kind} ({err})",
            field="--input",
            fix="check the file is complete and of that format, or pass a .jsonl file",
        ) from None


def _iter_arrow_files(source: InputSource, positions: Container[int] | None) -> Iterator[PromptRow]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    position = 0
    for file in source.files:
        if source.kind == "parquet":
            parquet = pq.ParquetFile(file)
            columns = [c for c in parquet.schema_arrow.names if c in ("id", *PROMPT_KEYS)]
            batches = parquet.iter_batches(batch_size=ARROW_BATCH_ROWS, columns=columns)
        else:
            with pa.memory_map(str(file)) as mapped:
                batches = iter(pa.ipc.open_stream(mapped).read_all().to_batches(ARROW_BATCH_ROWS))
        for batch in batches:
            count = batch.num_rows
            if positions is not None and not any(p in positions for p in range(position, position + count)):
                position += count
                continue
            for offset, record in enumerate(batch.to_pylist()):
                if positions is None or position + offset in positions:
                    where = f"{file} row {position + offset}"
                    yield row_from_record(record, position + offset, where)
            position += count


def row_from_record(record: Any, position: int, where: str) -> PromptRow:
    """Turn one decoded record into a PromptRow; UserError naming `where` if it can't."""
    if not isinstance(record, dict):
        raise UserError(
            "row is not a JSON object",
            field=where,
            fix='each row must look like {"id": ..., "conversations": [...]}',
        )
    turns = _turns(record, where)
    raw_id = record.get("id")
    row_id = derive_row_id(turns) if raw_id is None or raw_id == "" else str(raw_id)
    return PromptRow(position, row_id, turns)


def _turns(record: dict[str, Any], where: str) -> list[Message]:
    for key in PROMPT_KEYS:
        value = record.get(key)
        if value is None:
            continue
        if key == "prompt":
            if not isinstance(value, str) or not value:
                raise UserError(
                    "'prompt' must be a non-empty string", field=where, fix='write it as "prompt": "..."'
                )
            return [{"role": "user", "content": value}]
        return _chat_turns(value, key, where)
    raise UserError(
        f"row has none of {', '.join(PROMPT_KEYS)}",
        field=where,
        fix='give each row "conversations", "messages" or "prompt"',
    )


_TURNS_FIX = 'write it as [{"role": "user", "content": "..."}, ...]'


def _chat_turns(value: Any, key: str, where: str) -> list[Message]:
    if not isinstance(value, list) or not value:
        raise UserError(
            f"'{key}' must be a non-empty list of turns",
            field=where,
            fix='write it as [{"role": "user", "content": "..."}, ...]',
        )
    turns: list[Message] = []
    for turn in value:
        if not isinstance(turn, dict):
            raise UserError(
                f"'{key}' holds a non-object turn",
                field=where,
                fix='write it as [{"role": "user", "content": "..."}, ...]',
            )
        role = turn.get("role", turn.get("from"))
        content = turn.get("content", turn.get("value"))
        mapped = SHAREGPT_ROLES.get(str(role))
        if mapped is None or content is None:
            raise UserError(
                f"turn {turn!r:.80} lacks a known role or content",
                field=where,
                fix="each turn needs role (user/assistant/system) and content",
            )
        kept: Message = {"role": mapped, "content": content}
        if turn.get("reasoning_content") is not None:
            kept["reasoning_content"] = turn["reasoning_content"]
        turns.append(kept)
    while turns and turns[-1]["role"] == "assistant":
        turns.pop()
    if not turns:
        raise UserError(
            f"'{key}' has no user turn to answer",
            field=where,
            fix="end the conversation with the user turn the model should answer",
        )
    return turns


def check_output_dir(directory: Path) -> None:
    """UserError unless `directory` exists (or can be made) and is writable."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(
            f"cannot create {directory}: {err.strerror}",
            field="--output",
            fix="choose a directory you can write to",
        ) from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise UserError(
            f"{directory} is not writable",
            field="--output",
            fix="choose a directory you can write to, or fix its permissions",
        )
