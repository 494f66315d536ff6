"""Input parsing: every accepted format, id derivation, broken lines, duplicates, empty input."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specpilot.errors import UserError
from specpilot.generate.dispatch.endpoints import Endpoint
from specpilot.generate.job import Job, JobConfig
from specpilot.generate.rows import inputs
from specpilot.generate.rows.ids import derive_row_id
from specpilot.generate.rows.inputs import check_output_dir, iter_rows, resolve_input
from specpilot.generate.rows.types import PromptRow, RejectedRow
from specpilot.generate.sampling import Sampling
from tests.generate.conftest import write_jsonl

ROWS: list[dict[str, Any]] = [
    {
        "id": "a",
        "conversations": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "old answer"}],
    },
    {"id": 7, "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]},
    {"prompt": "no id here"},
    {"conversations": [{"from": "human", "value": "sharegpt"}, {"from": "gpt", "value": "x"}]},
]


def _rows(path: Path, keep_given_turns: bool = False) -> list[tuple[int, str, list[list[dict[str, object]]]]]:
    rows = []
    for r in iter_rows(resolve_input(path), keep_given_turns=keep_given_turns):
        assert isinstance(r, PromptRow), r
        rows.append((r.position, r.row_id, r.segments))
    return rows


def test_jsonl_shapes_become_chat_turns(tmp_path: Path) -> None:
    rows = _rows(write_jsonl(tmp_path / "in.jsonl", ROWS))
    assert [r[0] for r in rows] == [0, 1, 2, 3]
    assert rows[0][1:] == ("a", [[{"role": "user", "content": "hi"}]])  # old answer: the target rewrites it
    assert rows[1][1] == "7"
    assert rows[1][2] == [[{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]]
    assert rows[2][2] == [[{"role": "user", "content": "no id here"}]]
    assert rows[2][1] == derive_row_id([{"role": "user", "content": "no id here"}])
    assert rows[3][2] == [[{"role": "user", "content": "sharegpt"}]]
    # the derived id does not depend on the given answer the target replaces
    assert rows[3][1] == derive_row_id([{"role": "user", "content": "sharegpt"}])


MULTI_TURN = {
    "id": "m",
    "conversations": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "u1"},
        {"role": "assistant", "content": "given a1"},
        {"role": "user", "content": "u2"},
        {"role": "assistant", "content": "given a2"},
        {"role": "user", "content": "u3"},
    ],
}


def test_every_assistant_turn_is_a_target_turn_unless_given_turns_are_kept(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", [MULTI_TURN])
    ((_, _, segments),) = _rows(path)
    assert [[t["content"] for t in s] for s in segments] == [["be brief", "u1"], ["u2"], ["u3"]]
    ((_, _, kept),) = _rows(path, keep_given_turns=True)
    assert kept == [MULTI_TURN["conversations"]]


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def _assistant(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


BAD_ROWS: list[tuple[dict[str, Any], str, str]] = [
    ({"id": "o", "conversations": [_user("a"), _user("b")]}, "out of order", "order the turns"),
    ({"id": "s", "conversations": [_assistant("a"), _user("b")]}, "(assistant) is out of order", "order"),
    ({"id": "e", "conversations": [_user("  ")]}, "turn 0 (user) has empty content", "give it text"),
    ({"id": "f", "conversations": [{**_user("a"), "contnet": "x"}]}, "unknown field 'contnet'", "remove it"),
    (
        {"id": "t", "conversations": [_user("a"), _assistant("b"), {"role": "tool", "content": "42"}]},
        "tool result without an assistant tool call",
        "order",
    ),
    ({"id": "n"}, "none of conversations, messages, prompt", 'give each row "conversations"'),
]


@pytest.mark.parametrize(("record", "problem", "fix"), BAD_ROWS, ids=[r[0]["id"] for r in BAD_ROWS])
def test_bad_rows_are_rejected_with_line_id_and_fix(
    tmp_path: Path, record: dict[str, Any], problem: str, fix: str
) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", [{"id": "ok", "prompt": "fine"}, record])
    good, bad = iter_rows(resolve_input(path))
    assert isinstance(good, PromptRow)
    assert isinstance(bad, RejectedRow)
    line = bad.line()
    assert line.startswith(f"{path}:2 (id {record['id']}): ")
    assert problem in line and fix in line


def test_assistant_last_is_nothing_to_generate_only_when_given_turns_are_kept(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", [{"id": "x", "conversations": [_user("a"), _assistant("b")]}])
    (bad,) = iter_rows(resolve_input(path), keep_given_turns=True)
    assert isinstance(bad, RejectedRow) and "nothing to generate" in bad.problem
    assert "drop --keep-given-turns" in bad.fix
    ((_, _, segments),) = _rows(path)  # regenerating: the last answer is the target's to write
    assert segments == [[_user("a")]]


def test_tool_turns_need_the_given_calls_kept(tmp_path: Path) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
    record = {
        "id": "tool",
        "tools": [{"type": "function", "function": {"name": "add", "parameters": {}}}],
        "conversations": [
            _user("add"),
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": "42", "tool_call_id": "c1"},
        ],
    }
    path = write_jsonl(tmp_path / "in.jsonl", [record])
    (bad,) = iter_rows(resolve_input(path))
    assert isinstance(bad, RejectedRow) and "--keep-given-turns" in bad.fix
    (row,) = iter_rows(resolve_input(path), keep_given_turns=True)
    assert isinstance(row, PromptRow)
    assert row.tools == record["tools"] and row.segments[0][1]["tool_calls"] == [call]


def test_derived_id_is_stable_and_content_sensitive() -> None:
    turns = [{"role": "user", "content": "same"}]
    assert derive_row_id(turns) == derive_row_id([{"content": "same", "role": "user"}])
    assert derive_row_id(turns) != derive_row_id([{"role": "user", "content": "other"}])
    assert len(derive_row_id(turns)) == 32


def test_parquet_and_saved_dataset_read_like_jsonl(tmp_path: Path) -> None:
    import datasets  # type: ignore[import-untyped]

    records = [{"id": f"r{i}", "prompt": f"p{i}"} for i in range(10)]
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "in.parquet")
    datasets.Dataset.from_list(records).save_to_disk(str(tmp_path / "saved"))
    expected = _rows(write_jsonl(tmp_path / "in.jsonl", records))
    assert _rows(tmp_path / "in.parquet") == expected
    assert _rows(tmp_path / "saved") == expected
    # resume reads only the pending positions
    pending = [r.position for r in iter_rows(resolve_input(tmp_path / "saved"), {3, 9})]
    assert pending == [3, 9]


def test_broken_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('{"prompt": "ok"}\n\n{"prompt": "cut\n')
    with pytest.raises(UserError) as err:
        _rows(path)
    assert f"{path}:3" in str(err.value)
    assert "fix or delete that line" in str(err.value)


def test_rejected_rows_are_named_counted_and_skipped(tmp_path: Path) -> None:
    lines: list[str] = []
    rows = [
        {"id": "a", "prompt": "1"},
        {"id": "bad", "conversations": [_user("x"), _user("y")]},
        {"prompt": "2"},
    ]
    with _job(tmp_path, rows, notify=lines.append) as job:
        job.prepare("m")
        assert job.pending == {0, 2}
        assert job.ledger.meta()["rejected"] == "1"
    assert len(lines) == 1 and lines[0].startswith("rejected ") and ":2 (id bad): " in lines[0]
    assert '"id": "bad"' in (tmp_path / "out" / "rejected.jsonl").read_text()


def test_input_with_only_bad_rows_is_refused(tmp_path: Path) -> None:
    with (
        _job(tmp_path, [{"id": "x", "text": "?"}], notify=lambda line: None) as job,
        pytest.raises(UserError, match="no usable rows"),
    ):
        job.prepare("m")


def test_a_line_longer_than_the_bound_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file with no newlines (a binary, /dev/zero copied to disk) is not read whole."""
    monkeypatch.setattr(inputs, "MAX_LINE_BYTES", 64)
    path = tmp_path / "in.jsonl"
    path.write_text('{"prompt": "short"}\n{"prompt": "' + "x" * 100 + '"}\n')
    with pytest.raises(UserError) as err:
        _rows(path)
    assert f"{path}:2" in str(err.value) and "longer than" in str(err.value)
    monkeypatch.setattr(inputs, "MAX_LINE_BYTES", 1 << 10)
    assert len(_rows(path)) == 2


def _job(tmp_path: Path, rows: list[dict[str, Any]], **extra: object) -> Job:
    path = write_jsonl(tmp_path / "in.jsonl", rows)
    config = JobConfig(path, tmp_path / "out", [Endpoint("http://127.0.0.1:9")], "m", Sampling(True), **extra)  # type: ignore[arg-type]
    return Job(config)


def test_duplicate_ids_are_refused_with_names_and_fix(tmp_path: Path) -> None:
    rows = [
        {"id": "a", "prompt": "1"},
        {"id": "b", "prompt": "2"},
        {"id": "a", "prompt": "3"},
        {"prompt": "same"},
        {"prompt": "same"},
    ]
    with _job(tmp_path, rows) as job:
        with pytest.raises(UserError) as err:
            job.prepare("m")
        assert not job.ledger.is_initialized()  # nothing half-listed
    assert "2 rows repeat an earlier id" in str(err.value)
    assert "a," in str(err.value) and "--dedupe" in str(err.value)


def test_dedupe_keeps_the_first_row_of_each_id(tmp_path: Path) -> None:
    rows = [{"id": "a", "prompt": "1"}, {"id": "b", "prompt": "2"}, {"id": "a", "prompt": "3"}]
    with _job(tmp_path, rows, dedupe=True) as job:
        job.prepare("m")
        assert job.pending == {0, 1}
        assert job.ledger.meta()["duplicates_skipped"] == "1"


def test_empty_input_is_refused(tmp_path: Path) -> None:
    with _job(tmp_path, []) as job, pytest.raises(UserError, match="has no usable rows"):
        job.prepare("m")


def test_changed_input_or_parameters_refuse_to_resume(tmp_path: Path) -> None:
    with _job(tmp_path, [{"prompt": "1"}]) as job:
        job.prepare("m")
        with pytest.raises(UserError, match="another `specpilot generate`"):
            _job(tmp_path, [{"prompt": "1"}])  # one writer per directory
    with _job(tmp_path, [{"prompt": "1"}]) as job, pytest.raises(UserError, match="model=m"):
        job.prepare("other-model")
    with _job(tmp_path, [{"prompt": "2"}]) as job, pytest.raises(UserError, match="changed since"):
        job.prepare("m")


def test_unwritable_output_dir(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UserError, match="--output"):
        check_output_dir(blocker / "out")


def test_fields_a_row_has_beyond_the_prompt_are_ignored_unless_strict(tmp_path: Path) -> None:
    """Users' files carry `source` and `category`: the row is used, the fields named; --strict
    refuses such a row as before."""
    path = write_jsonl(tmp_path / "in.jsonl", [{"id": "g", "prompt": "a", "source": "web", "category": "x"}])
    (row,) = iter_rows(resolve_input(path))
    assert isinstance(row, PromptRow) and row.ignored_fields == ("category", "source")
    (strict,) = iter_rows(resolve_input(path), strict=True)
    assert isinstance(strict, RejectedRow)
    assert strict.problem == "unknown field 'category'" and "drop --strict" in strict.fix


def test_a_row_with_only_other_fields_names_them(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", [{"instruction": "hi", "output": "x"}])
    (bad,) = iter_rows(resolve_input(path))
    assert isinstance(bad, RejectedRow)
    assert bad.problem == "row has none of conversations, messages, prompt (it has instruction, output)"


def test_a_json_array_is_read_as_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "prompts.json"
    path.write_text(json.dumps([{"id": "a", "prompt": "1"}, {"prompt": "2"}, {"id": "c"}], indent=2))
    a, b, c = iter_rows(resolve_input(path))
    assert isinstance(a, PromptRow) and a.row_id == "a" and a.position == 0
    assert isinstance(b, PromptRow) and b.position == 1
    assert isinstance(c, RejectedRow) and c.where == f"{path} element 2"
    (again,) = iter_rows(resolve_input(path), positions={1})  # a resume reads only what is pending
    assert isinstance(again, PromptRow) and again.row_id == b.row_id


def test_rejected_rows_are_summed_up_by_reason(tmp_path: Path) -> None:
    lines: list[str] = []
    rows = [{"id": "ok", "prompt": "1"}] + [{"id": f"n{i}", "conversations": []} for i in range(500)]
    rows += [{"id": "bad", "conversations": [_user("x"), _user("y")]}]
    with _job(tmp_path, rows, notify=lines.append) as job:
        job.prepare("m")
        assert job.ledger.meta()["rejected"] == "501"
    rejected = [line for line in lines if line.startswith("rejected ")]
    assert len(rejected) == 2, lines
    assert rejected[0].startswith("rejected 500 rows: 'conversations' is not a non-empty list of turns; ")
    assert rejected[0].endswith(f"(first: {tmp_path / 'in.jsonl'}:2 (id n0))")
    assert rejected[1].startswith("rejected ") and ":502 (id bad): " in rejected[1]
    assert (tmp_path / "out" / "rejected.jsonl").read_text().count("\n") == 501


def test_ignored_fields_are_one_line_for_the_whole_input(tmp_path: Path) -> None:
    lines: list[str] = []
    rows = [{"id": str(i), "prompt": "p", "source": "web", "category": "c"} for i in range(300)]
    with _job(tmp_path, rows, notify=lines.append) as job:
        job.prepare("m")
        assert job.pending == set(range(300))
    assert lines == [
        "ignored fields specpilot does not read: category in 300 rows, source in 300 rows "
        "(--strict refuses such rows)"
    ]


@pytest.mark.parametrize("written", ["data/part-00000.jsonl", "errors.jsonl", "flagged/part-00000.jsonl"])
def test_an_input_among_the_files_generate_writes_is_refused(tmp_path: Path, written: str) -> None:
    """`--input D/data/part-00000.jsonl --output D`: the job would overwrite or empty its input."""
    from click.testing import CliRunner

    from specpilot.cli import cli

    out = tmp_path / "out"
    prompts = out / written
    prompts.parent.mkdir(parents=True)
    write_jsonl(prompts, [{"id": "a", "prompt": "x"}])
    before = prompts.read_bytes()
    argv = ["generate", "--input", str(prompts), "--output", str(out), "--server", "http://127.0.0.1:9"]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 2, result.output
    assert f"--input: {prompts} is a file generate writes in {out}" in result.stderr
    assert prompts.read_bytes() == before and not (out / "ledger.sqlite").exists()


def test_an_input_hard_linked_to_a_file_generate_writes_is_refused(tmp_path: Path) -> None:
    """`ln D/data/part-00000.jsonl p.jsonl`: one file under two names; generate's repair of the
    part emptied the prompts."""
    from click.testing import CliRunner

    from specpilot.cli import cli

    out = tmp_path / "out"
    part = out / "data" / "part-00000.jsonl"
    part.parent.mkdir(parents=True)
    write_jsonl(part, [{"id": "a", "prompt": "x"}])
    prompts = tmp_path / "prompts.jsonl"
    os.link(part, prompts)
    before = prompts.read_bytes()
    argv = ["generate", "--input", str(prompts), "--output", str(out), "--server", "http://127.0.0.1:9"]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 2, result.output
    assert f"--input: {prompts} (a hard link of {part}) is a file generate writes in {out}" in result.stderr
    assert prompts.read_bytes() == before and not (out / "ledger.sqlite").exists()
