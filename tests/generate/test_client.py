"""Response parsing, retry classification, validation flags, metrics parsing, endpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specpilot.errors import UserError
from specpilot.generate.dispatch.client import FailureKind, RequestFailed, classify_status, parse_answer
from specpilot.generate.dispatch.endpoints import endpoint_of_run, normalize_url, resolve_endpoints
from specpilot.generate.dispatch.servers import SpecTracker, parse_metrics
from specpilot.generate.rows.types import Answer
from specpilot.generate.rows.validate import answer_flags, flag_bits
from specpilot.generate.sampling import Sampling
from specpilot.launch.state import write_state
from tests.launch.helpers import ready_state


def _response(message: dict[str, object], **extra: object) -> bytes:
    return json.dumps(
        {
            "choices": [{"message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 10},
            **extra,
        }
    ).encode()


@pytest.mark.parametrize("status", [408, 409, 425, 429, 500, 502, 503, 504])
def test_transient_statuses_are_retried(status: int) -> None:
    assert classify_status(status) is FailureKind.RETRYABLE


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
def test_other_client_errors_fail_at_once(status: int) -> None:
    assert classify_status(status) is FailureKind.FATAL


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_both_reasoning_spellings(field: str) -> None:
    answer = parse_answer(_response({"content": "4", field: "2+2"}))
    assert (answer.content, answer.reasoning, answer.finish_reason) == ("4", "2+2", "stop")
    assert (answer.prompt_tokens, answer.completion_tokens) == (3, 10)


def test_spec_acceptance_from_verify_count() -> None:
    answer = parse_answer(_response({"content": "x"}, meta_info={"spec_verify_ct": 4}))
    assert answer.spec_accept_length == 2.5
    assert parse_answer(_response({"content": "x"})).spec_accept_length is None


def test_malformed_body_is_retryable() -> None:
    with pytest.raises(RequestFailed) as err:
        parse_answer(b'{"object": "error"}')
    assert err.value.kind is FailureKind.RETRYABLE


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"choices": "x"}, "choices is missing or not an array"),
        ({"choices": [{"message": "hello"}]}, "message is missing or not an object"),
        ({"choices": [{"message": {"content": 5}}]}, "content is missing or not a string"),
        (
            {"choices": [{"message": {"content": "x"}}], "usage": {"completion_tokens": "many"}},
            "completion_tokens is missing or not a whole number",
        ),
    ],
)
def test_a_wrong_type_is_said_in_words(body: object, said: str) -> None:
    """errors.jsonl read "completion_tokens is missing or not a int" (Python's type names)."""
    with pytest.raises(RequestFailed) as err:
        parse_answer(json.dumps(body).encode())
    assert f"({said})" in str(err.value), err.value


def test_request_body_carries_thinking_and_sampling() -> None:
    body = Sampling(thinking=False, max_tokens=5, temperature=0.6, top_k=20).request_body("m")
    assert body == {
        "model": "m",
        "max_tokens": 5,
        "temperature": 0.6,
        "top_k": 20,
        "chat_template_kwargs": {"enable_thinking": False},
    }


def _answer(content: str, reasoning: str | None, finish: str = "stop") -> Answer:
    return Answer(content, reasoning, finish, 1, 1, None)


def test_validation_flags() -> None:
    assert answer_flags(_answer("ok", "why"), thinking=True) == []
    assert answer_flags(_answer("ok", None), thinking=False) == []
    assert answer_flags(_answer(" ", None), thinking=True) == ["empty_content", "missing_reasoning"]
    assert answer_flags(_answer("a</think>b", "r"), thinking=True) == ["think_markers"]
    assert answer_flags(_answer("a", "<think>r", "length"), True) == ["think_markers", "truncated"]
    assert flag_bits(["empty_content", "truncated"]) == 0b1001


def test_vllm_metrics_give_mean_acceptance_length() -> None:
    tracker = SpecTracker()
    first = 'vllm:spec_decode_num_drafts_total{m="a"} 10\nvllm:spec_decode_num_accepted_tokens_total 20\n'
    later = (
        '# HELP x\nvllm:spec_decode_num_drafts_total{m="a"} 30\n'
        "vllm:spec_decode_num_accepted_tokens_total 70\n"
    )
    tracker.observe("s", parse_metrics(first))
    assert tracker.mean_accept_length() is None  # no drafts since the first scrape
    tracker.observe("s", parse_metrics(later))
    assert tracker.mean_accept_length() == pytest.approx(1 + 50 / 20)


def test_sglang_gauge() -> None:
    tracker = SpecTracker()
    tracker.observe("s", parse_metrics('sglang:spec_accept_length{model_name="q"} 3.25\n'))
    assert tracker.mean_accept_length() == 3.25


def test_endpoint_urls_and_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert normalize_url("127.0.0.1:8000/v1/") == "http://127.0.0.1:8000"
    monkeypatch.setenv("SPECPILOT_HOME", str(tmp_path))
    with pytest.raises(UserError, match="no run named 'q'"):
        endpoint_of_run("q")
    write_state(ready_state("q", endpoint="http://h:1", phase="starting", served_model_name="qwen"))
    with pytest.raises(UserError, match="not ready"):
        endpoint_of_run("q")
    write_state(ready_state("q", endpoint="http://h:1/v1", served_model_name="qwen"))
    assert endpoint_of_run("q").base_url == "http://h:1"
    assert endpoint_of_run("q").served_model_name == "qwen"
    with pytest.raises(UserError, match="no server given"):
        resolve_endpoints((), ())
