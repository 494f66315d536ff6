"""The export formats, one record each: a new format is one `ExportFormat` here and its writer.

Light on purpose: the CLI builds `--format`'s choices and help from this module and the job
file checks `[job] export` against it, so it names each writer as "module:function" (loaded
only when that format is written, as `cli/commands.py` loads commands) rather than importing
pyarrow for a `--help`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specpilot.errors import UserError
from specpilot.export.writing import WriteRequest, Written

#: a format's writer: the committed rows of `request.directory` into `request.target`
Writer = Callable[[WriteRequest], Written]


@dataclass(frozen=True)
class ExportFormat:
    name: str
    #: the target's name in the job folder when `--to` is not given
    default_name: str
    #: what it writes, for `--format`'s help
    writes: str
    #: None: the target is one file; else which names of a folder target this format writes
    #: (an --overwrite replaces a folder holding only those)
    owns: Callable[[str], bool] | None
    #: "module:function" of its `Writer`
    writer: str
    #: takes SpecForge's chat template (`--chat-template`); the other formats carry none
    takes_template: bool = False
    #: splits a conversation into one row per target turn (`--per-turn/--whole-conversations`)
    splits_turns: bool = False

    def load_writer(self) -> Writer:
        module_name, _, attribute = self.writer.partition(":")
        writer: Writer = getattr(importlib.import_module(module_name), attribute)
        return writer

    def default_target(self, directory: Path) -> Path:
        return directory / self.default_name


def _parquet_shard(name: str) -> bool:
    return name.endswith(".parquet")


def _saved_dataset(name: str) -> bool:
    return name in ("state.json", "dataset_info.json") or (
        name.startswith("data-") and name.endswith(".arrow")
    )


#: every format, in the order `--help` and the README list them
FORMATS: dict[str, ExportFormat] = {
    f.name: f
    for f in (
        ExportFormat(
            "specforge",
            "specforge.jsonl",
            "one JSONL file",
            owns=None,
            writer="specpilot.export.jsonl:write_specforge",
            takes_template=True,
            splits_turns=True,
        ),
        ExportFormat(
            "speculators",
            "speculators.jsonl",
            "one JSONL file",
            owns=None,
            writer="specpilot.export.jsonl:write_speculators",
        ),
        ExportFormat(
            "parquet",
            "parquet",
            "shards",
            owns=_parquet_shard,
            writer="specpilot.export.arrow:write_parquet",
        ),
        ExportFormat(
            "hf",
            "hf",
            "a datasets save_to_disk folder",
            owns=_saved_dataset,
            writer="specpilot.export.arrow:write_hf",
        ),
    )
}


def format_named(name: str, *, field: str) -> ExportFormat:
    """The format called `name`; an unknown one is refused with the list of known ones."""
    found = FORMATS.get(name)
    if found is None:
        raise UserError(f"unknown format {name!r}", field=field, fix=f"use {', '.join(FORMATS)}")
    return found


def names_with(has: Callable[[ExportFormat], bool]) -> str:
    """The formats with a property (`takes_template`, ...), for the messages refusing a flag."""
    return " or ".join(f.name for f in FORMATS.values() if has(f))


def format_help() -> str:
    """`--format`'s help: what each format writes."""
    return "; ".join(f"{f.name}: {f.writes}" for f in FORMATS.values()) + "."


def target_help() -> str:
    """`--to`'s help: each format's default target."""
    return f"Where to write (default {', '.join(f'DIR/{f.default_name}' for f in FORMATS.values())})."
