"""The fast path of reading JSONL rows gives what the general checks give, row for row.

A fresh job checks every input row before its first request; the common row (an id and
plain text turns) is checked in one pass and its line parsed by the JSON scanner without
json.loads' per-call checks. These tests hold both to the general path: the same
PromptRow, the same rejection (with its reason), the same error for a broken line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specpilot.errors import UserError
from specpilot.generate.rows import inputs
from specpilot.generate.rows.inputs import iter_rows, resolve_input, row_from_record
from specpilot.generate.rows.types import PromptRow, RejectedRow

COMMON_ROWS: list[dict[str, Any]] = [
    {"id": "a", "conversations": [{"role": "user", "content": "hi"}]},
    {"id": "b", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]},
    {"id": "c", "prompt": "one turn"},
    {"id": "d", "conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]},
    {
        "id": "e",
        "conversations": [
            {"role": "user", "content": "q1"},
            {"role": "assistant", "content": ""},
            {"role": "user", "content": "q2"},
        ],
    },
]


def _general(line: bytes, where: str, keep_given_turns: bool) -> PromptRow | RejectedRow:
    """What the general path makes of one line: json.loads, every check."""
    return row_from_record(json.loads(line), 0, where, keep_given_turns=keep_given_turns)


def _read(tmp_path: Path, line: bytes, keep_given_turns: bool) -> tuple[Path, list[PromptRow | RejectedRow]]:
    path = tmp_path / "in.jsonl"
    path.write_bytes(line)
    return path, list(iter_rows(resolve_input(path), keep_given_turns=keep_given_turns))


@pytest.mark.parametrize("record", COMMON_ROWS)
@pytest.mark.parametrize("keep_given_turns", [False, True])
def test_common_rows_take_the_fast_path_with_the_general_result(
    tmp_path: Path, record: dict[str, Any], keep_given_turns: bool
) -> None:
    line = json.dumps(record).encode() + b"\n"
    fast = inputs._plain_row(json.loads(line), 0, keep_given_turns)
    general = _general(line, f"{tmp_path / 'in.jsonl'}:1", keep_given_turns)
    if keep_given_turns and record["id"] in ("d", "e"):  # ends with an answer / an empty one
        assert fast is None and isinstance(general, RejectedRow)
    else:
        assert fast is not None and fast == general
    assert _read(tmp_path, line, keep_given_turns)[1] == [general]


TEXT = st.sampled_from(["q", "", " ", "\u3000", "a\nb", "é", "\u2028", "\ud800", "x\udfff", "\U0001f600"])
VALUE = st.one_of(
    TEXT, st.none(), st.integers(0, 2), st.lists(st.just({"type": "text", "text": "x"}), max_size=1)
)
ROLE = st.sampled_from(["user", "system", "assistant", "tool", "human", "gpt", "bot", "", 3])
TURN = st.dictionaries(
    st.sampled_from(["role", "from", "content", "value", "name", "tool_calls", "extra"]),
    st.one_of(ROLE, VALUE),
    max_size=3,
)
TURNS = st.one_of(
    st.lists(TURN, max_size=4), st.lists(st.fixed_dictionaries({"role": ROLE, "content": TEXT}), max_size=4)
)
RECORD = st.dictionaries(
    st.sampled_from(["id", "conversations", "messages", "prompt", "tools", "source"]),
    st.one_of(TURNS, TEXT, st.none(), st.integers(0, 9)),
    max_size=3,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    record=st.one_of(RECORD, st.fixed_dictionaries({"id": TEXT, "conversations": TURNS})),
    keep=st.booleans(),
    ascii_only=st.booleans(),
)
def test_any_row_reads_as_the_general_checks_read_it(
    tmp_path: Path, record: dict[str, Any], keep: bool, ascii_only: bool
) -> None:
    # escaped (json.dumps' default) or raw UTF-8; a lone surrogate encoded as json.loads reads it
    line = json.dumps(record, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass") + b"\n"
    path, rows = _read(tmp_path, line, keep)
    assert rows == [_general(line, f"{path}:1", keep)]


@pytest.mark.parametrize(
    "line",
    [
        b'{"id": "a", "prompt": "q"}\r\n',  # CRLF
        b'{"id": "a", "prompt": "q"}  \t',  # trailing blanks, no newline
        b'  {"id": "a", "prompt": "q"}\n',  # leading blanks: json.loads' own path
        b'\xef\xbb\xbf{"id": "a", "prompt": "q"}\n',  # a UTF-8 BOM
        b'{"id": "a", "prompt": "\\ud800"}\n',  # an escaped lone surrogate: rejected
        b'{"id": "a", "prompt": "\xed\xa0\x80"}\n',  # a UTF-8-encoded one: rejected
        b'{"id": "a", "prompt": "\\ud83d\\ude00"}\n',  # a whole pair: fine
    ],
)
def test_lines_outside_the_common_shape_read_as_json_loads_reads_them(tmp_path: Path, line: bytes) -> None:
    path, rows = _read(tmp_path, line, False)
    assert rows == [_general(line, f"{path}:1", False)]


@pytest.mark.parametrize(
    "line",
    [
        b'{"id": "a", "prompt": "q"} {"id": "b", "prompt": "q"}\n',  # two objects on a line
        b'{"id": "a", "prompt": "q"}x\n',
        b'{"id": "a", "prompt": "q"\n',
        b'{"id": "a", "prompt": "\xff"}\n',  # not UTF-8
        b'{"id": "a", "prompt": nan]\n',  # not a JSON constant (NaN is one to Python: below)
    ],
)
def test_a_broken_line_stops_with_json_loads_reason(tmp_path: Path, line: bytes) -> None:
    with pytest.raises(ValueError) as expected:
        json.loads(line)
    with pytest.raises(UserError) as raised:
        _read(tmp_path, line, False)
    assert f"line 1 is not valid JSON ({expected.value.args[0]})" in str(raised.value)


@pytest.mark.parametrize(
    ("line", "number"),
    [
        (b'{"id": "a", "prompt": "q", "weight": NaN}\n', "NaN"),
        (
            b'{"id": "a", "messages": [{"role": "user", "content": "q"}], "tools": [{"max": Infinity}]}\n',
            "Infinity",
        ),
        (b'  {"id": "a", "prompt": "q", "w": -Infinity}\n', "-Infinity"),  # json.loads' own path
        (b'{"id": "a", "prompt": "q", "w": 1e999}\n', "1e999"),
    ],
)
def test_a_number_strict_json_has_not_stops_the_listing_naming_it(
    tmp_path: Path, line: bytes, number: str
) -> None:
    """Python's json reads NaN, Infinity and 1e999 (as inf): a row's tools holding one went to
    the server and into the parts and the exports as `Infinity`, which strict readers refuse."""
    with pytest.raises(UserError) as raised:
        _read(tmp_path, line, False)
    assert f"line 1 is not valid JSON ({number} is not a finite number" in str(raised.value)
