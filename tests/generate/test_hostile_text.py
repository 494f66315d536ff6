"""Hostile text in prompts and answers: refused per row, never the end of the job.

JSON may hold a lone surrogate escape (`"\\ud800"`) that Python decodes but no UTF-8
writer encodes. Once, one such answer or prompt raised UnicodeEncodeError inside the
job and ended it (0 rows written, every row left in flight), on every rerun.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specpilot.export.formats import FORMATS
from specpilot.export.run import export
from specpilot.generate.dispatch.client import ChatClient, RequestFailed, parse_answer
from specpilot.generate.dispatch.endpoints import Endpoint
from specpilot.generate.job import JobConfig
from specpilot.generate.ledger.store import Ledger
from specpilot.generate.rows.inputs import iter_rows, resolve_input
from specpilot.generate.rows.output import TurnResult, build_row, messages_for
from specpilot.generate.rows.types import PromptRow
from specpilot.generate.sampling import Sampling
from specpilot.generate.writers.parts import PartWriter
from tests.fakeengines.standin import SURROGATE_MARKER, StandIn
from tests.fixtures.jobs import run_generate
from tests.generate.conftest import prompt_rows, read_output, write_jsonl


def _config(tmp_path: Path, server: StandIn, rows: list[dict[str, Any]], **extra: Any) -> JobConfig:
    path = write_jsonl(tmp_path / "in.jsonl", rows)  # json.dumps writes "\ud800" as its escape
    return JobConfig(
        path, tmp_path / "out", [Endpoint(server.url)], None, Sampling(False),
        concurrency=4, retry_base_s=0.0, retry_cap_s=0.01, max_attempts=2,
        show_progress=False, flush_interval_s=0.05, **extra,
    )  # fmt: skip


def test_an_answer_with_a_lone_surrogate_fails_its_row_after_retries(
    tmp_path: Path, fake_server: StandIn
) -> None:
    rows = prompt_rows(10)
    for index in (2, 7):
        rows[index]["conversations"][0]["content"] += f" {SURROGATE_MARKER}"
    outcome = run_generate(_config(tmp_path, fake_server, rows))
    assert outcome.exit_code == 1
    assert outcome.message.startswith("2 rows failed after all retries")
    assert sorted(row["id"] for row in read_output(tmp_path / "out")) == sorted(
        f"q{i}" for i in range(10) if i not in (2, 7)
    )
    errors = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert [(e["id"], e["attempts"]) for e in errors] == [("q2", 2), ("q7", 2)]
    assert all("content (U+D800 at character" in e["error"] for e in errors)


def test_a_prompt_with_a_lone_surrogate_is_rejected_and_the_rest_are_done(
    tmp_path: Path, fake_server: StandIn
) -> None:
    rows: list[dict[str, Any]] = prompt_rows(6)
    rows[1]["conversations"][0]["content"] = "bad \ud800 text"
    rows.append({"id": "bad-id-\udc00", "prompt": "hello"})
    rows.append({"prompt": "fine", "tools\ud800": []})
    notes: list[str] = []
    outcome = run_generate(_config(tmp_path, fake_server, rows, notify=notes.append))
    assert outcome.exit_code == 0, outcome.message
    assert outcome.message.startswith("all 5 rows done; 3 input rows were rejected")
    rejected = [json.loads(line) for line in (tmp_path / "out" / "rejected.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rejected] == ["q1", "bad-id-\\udc00", None]
    assert "conversations[0].content (U+D800 at character 4) is a lone surrogate" in rejected[0]["problem"]
    assert rejected[1]["problem"].startswith("id (U+DC00 at character 7)")
    assert rejected[2]["problem"].startswith("a key in the row (U+D800")
    assert sum("rejected" in note and "lone surrogate" in note for note in notes) == 3


#: any code point: surrogates, controls, noncharacters, BOM, line separators
HOSTILE = st.text(
    st.one_of(
        st.characters(), st.characters(categories=["Cs"]), st.sampled_from('\x00\x1b\u2028\ufeff\uffff"\\')
    ),
    max_size=12,
)


def _encodable(text: str) -> bool:
    return not any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def _usable(text: str) -> bool:
    return _encodable(text) and bool(text.strip())


def _round_trip(text: str, directory: Path) -> None:
    """`text` as a prompt and as an answer, through every step a row takes."""
    inputs = directory / "in.jsonl"
    escaped = json.dumps({"id": "r", "prompt": text}) + "\n"
    raw = json.dumps({"id": "s", "prompt": text}, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n"
    inputs.write_bytes(escaped.encode() + raw)
    # JSON's escapes join a high and a low surrogate into one character; raw bytes do not
    as_escaped = json.loads(json.dumps(text))
    read = list(iter_rows(resolve_input(inputs)))
    expected = [_usable(as_escaped) and as_escaped, _usable(text) and text]
    assert [
        row.segments[0][0]["content"] if isinstance(row, PromptRow) else False for row in read
    ] == expected
    client = ChatClient(None, "m", Sampling(thinking=True))  # type: ignore[arg-type]
    for row in read:
        if isinstance(row, PromptRow):
            body = json.loads(client.body(messages_for(row, [])))
            assert body["messages"] == row.segments[0]

    answer_body = {
        "choices": [{"message": {"content": text, "reasoning_content": text}, "finish_reason": "stop"}]
    }
    try:
        answer = parse_answer(json.dumps(answer_body).encode())
    except RequestFailed as failure:
        assert not _encodable(as_escaped) and "lone surrogate" in str(failure)
        return
    assert _encodable(as_escaped) and answer.content == as_escaped and answer.reasoning == as_escaped
    text = as_escaped
    row = PromptRow(0, "row-0", [[{"role": "user", "content": "q"}]])
    job = directory / "job"
    job.mkdir()
    ledger = Ledger.in_dir(job)
    ledger.initialize([(0, row.row_id)], dict)
    writer = PartWriter(job / "data", {}, 10)
    output = build_row(row, [TurnResult(answer, "s")], model="m", thinking=True, keep_given_turns=False)
    writer.add(output, 0, 1, 1, 0, 0.0)
    ledger.apply(writer.flush())
    writer.close()
    ledger.close()
    for fmt in FORMATS:
        result = export(job, fmt, directory / "exports" / FORMATS[fmt].default_name)
        assert result.rows == 1
        for file in result.files:
            if file.suffix == ".jsonl":
                turns = json.loads(file.read_text(encoding="utf-8"))["conversations"]
            elif file.suffix == ".parquet":
                turns = pq.read_table(file).column("conversations").to_pylist()[0]
            else:
                with pa.memory_map(str(file)) as mapped:
                    turns = pa.ipc.open_stream(mapped).read_all().column("conversations").to_pylist()[0]
            assert (turns[-1]["content"], turns[-1]["reasoning_content"]) == (text, text)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=HOSTILE)
def test_any_text_is_refused_or_carried_through_unchanged(text: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        _round_trip(text, Path(directory))


@pytest.mark.parametrize("text", ["\ud800", "a\udfffb", "\U0001f600\ud83d", "\x00", "\ud800\udc00", " "])
def test_known_hostile_texts(tmp_path: Path, text: str) -> None:
    _round_trip(text, tmp_path)
