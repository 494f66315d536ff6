"""The README's row format and export table are what the code writes (a real job's row)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from specpilot.export.arrow import META, TURN_META
from specpilot.export.formats import FORMATS
from specpilot.generate.rows.output import META_FIELDS, TURN_FIELDS
from tests.fakeengines.standin import StandIn
from tests.fixtures.jobs import run_generate
from tests.generate.conftest import read_output
from tests.generate.test_job import _config

README = Path(__file__).parents[2] / "README.md"


def _section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"\n## {title}\n")
    return text[start : text.index("\n## ", start + 1)]


def _first_column(table_text: str, header: str) -> list[str]:
    lines = table_text[table_text.index(f"| {header} |") :].splitlines()[2:]
    names = []
    for line in lines:
        if not line.startswith("| `"):
            break
        names.append(re.match(r"\| `([^`]+)`", line).group(1))  # type: ignore[union-attr]
    return names


def _fields(row: dict[str, Any]) -> set[str]:
    fields = (set(row) - {"meta"}) | {f"meta.{key}" for key in row["meta"]}
    for turn in row["meta"]["turns"]:
        fields |= {f"meta.turns[].{key}" for key in turn}
    return fields


def test_documented_row_fields_are_the_written_ones(tmp_path: Path) -> None:
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    rows = [{"id": "t", "tools": tools, "conversations": [{"role": "user", "content": "add 2 and 3"}]}]
    server = StandIn().start()
    try:
        assert run_generate(_config(tmp_path, [server], 0, input_rows=rows)).exit_code == 0
    finally:
        server.close()
    (row,) = read_output(tmp_path / "out")
    documented = _first_column(_section("Training data"), "field")
    assert len(documented) == len(set(documented))
    assert set(documented) == _fields(row)
    # in the order rows.py declares them
    assert [f[len("meta.") :] for f in documented if f.startswith("meta.") and "[]" not in f] == list(
        META_FIELDS
    )
    assert [f[len("meta.turns[].") :] for f in documented if f.startswith("meta.turns[].")] == list(
        TURN_FIELDS
    )
    assert list(row["meta"]) == list(META_FIELDS) and list(row["meta"]["turns"][0]) == list(TURN_FIELDS)
    assert META.names == list(META_FIELDS) and TURN_META.names == list(
        TURN_FIELDS
    )  # Parquet/hf keep them all
    assert row["tools"] == tools and server.counts.bodies[0]["tools"] == tools  # carried to the server too


def test_documented_export_formats_are_the_written_ones() -> None:
    table = _section("Training data")
    formats = _first_column(table, "format")
    assert formats == list(FORMATS)
    for name, fmt in FORMATS.items():
        default_target = fmt.default_name
        line = next(line for line in table.splitlines() if line.startswith(f"| `{name}` |"))
        assert f"`out/{default_target}" in line, name
