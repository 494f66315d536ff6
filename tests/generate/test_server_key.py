"""`generate` against a server started with --api-key (every path but /health and /metrics wants
the key, as SGLang's and vLLM's middleware do): the key of $SPECPILOT_API_KEY goes on the
/v1/models question too, and a missing or wrong key is named, with the variable to set.

Once, the model question went without the key ("no server answered /v1/models, so the model
name is unknown" with the key set), and a run without it failed every row with "see
errors.jsonl", each line of which said HTTP 401.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from specpilot.cli import cli
from tests.fakeengines.standin import Faults, StandIn
from tests.generate.conftest import prompt_rows, write_jsonl

KEY = "sk-PLANTED-srv-5e1a"


@pytest.fixture
def keyed_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[StandIn]:
    monkeypatch.setenv("VLLM_API_KEY", KEY)  # the stand-in's key, as vLLM reads it
    monkeypatch.delenv("SPECPILOT_API_KEY", raising=False)
    server = StandIn(Faults()).start()
    yield server
    server.close()


def _generate(tmp_path: Path, server: StandIn, *extra: str) -> Result:
    inputs = write_jsonl(tmp_path / "in.jsonl", prompt_rows(4))
    argv = ["generate", "--input", str(inputs), "--output", str(tmp_path / "out"), "--server", server.url]
    return CliRunner().invoke(cli, [*argv, "--max-tokens", "8", "--json", *extra], catch_exceptions=False)


def test_the_key_goes_on_the_model_question_too(
    tmp_path: Path, keyed_server: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECPILOT_API_KEY", KEY)
    result = _generate(tmp_path, keyed_server)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["done"] == 4


@pytest.mark.parametrize("sent", [None, "sk-wrong-key-0000"], ids=["no-key", "wrong-key"])
def test_a_missing_or_wrong_key_is_named_before_any_row(
    tmp_path: Path, keyed_server: StandIn, monkeypatch: pytest.MonkeyPatch, sent: str | None
) -> None:
    if sent is not None:
        monkeypatch.setenv("SPECPILOT_API_KEY", sent)
    result = _generate(tmp_path, keyed_server)
    assert result.exit_code == 2, result.output
    refusal = json.loads(result.stdout)
    assert "answered 401: the server wants an API key" in refusal["error"], refusal
    assert refusal["fix"] == "set $SPECPILOT_API_KEY to the --api-key the server was started with"
    assert KEY not in result.output and (sent is None or sent not in result.output)


def test_rows_failed_for_want_of_the_key_say_so(tmp_path: Path, keyed_server: StandIn) -> None:
    """With --model the model question is not asked: each row's request gets the 401."""
    result = _generate(tmp_path, keyed_server, "--model", "fake-model")
    assert result.exit_code == 1, result.output
    said = json.loads(result.stdout)["message"]
    assert said.startswith("4 rows failed after all retries (4 answers were 401/403"), said
    assert "set $SPECPILOT_API_KEY to the --api-key the server was started with" in said
