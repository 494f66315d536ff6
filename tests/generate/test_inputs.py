"""Input parsing: every accepted format, id derivation, broken lines, duplicates, empty input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specpilot.errors import UserError
from specpilot.generate import inputs
from specpilot.generate.endpoints import Endpoint
from specpilot.generate.ids import derive_row_id
from specpilot.generate.inputs import check_output_dir, iter_rows, resolve_input
from specpilot.generate.job import Job, JobConfig
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


def _rows(path: Path) -> list[tuple[int, str, list[dict[str, object]]]]:
    return [(r.position, r.row_id, r.turns) for r in iter_rows(resolve_input(path))]


def test_jsonl_shapes_become_chat_turns(tmp_path: Path) -> None:
    rows = _rows(write_jsonl(tmp_path / "in.jsonl", ROWS))
    assert [r[0] for r in rows] == [0, 1, 2, 3]
    assert rows[0][1:] == ("a", [{"role": "user", "content": "hi"}])  # old answer dropped
    assert rows[1][1] == "7"
    assert rows[1][2][0] == {"role": "system", "content": "be brief"}
    assert rows[2][2] == [{"role": "user", "content": "no id here"}]
    assert rows[2][1] == derive_row_id([{"role": "user", "content": "no id here"}])
    assert rows[3][2] == [{"role": "user", "content": "sharegpt"}]


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


def test_row_without_prompt_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="none of conversations, messages, prompt"):
        _rows(write_jsonl(tmp_path / "in.jsonl", [{"id": "x", "text": "?"}]))


def _job(tmp_path: Path, rows: list[dict[str, Any]], **extra: object) -> Job:
    path = write_jsonl(tmp_path / "in.jsonl", rows)
    config = JobConfig(path, tmp_path / "out", [Endpoint("http://127.0.0.1:9")], "m", True, **extra)  # type: ignore[arg-type]
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
    with _job(tmp_path, []) as job, pytest.raises(UserError, match="has no rows"):
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
