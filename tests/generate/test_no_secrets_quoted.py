"""A key a server quotes back (a 400 naming the key it refused, a 500 echoing the request and
its headers) and an --extra-body field named like a credential never reach the ledger,
errors.jsonl, manifest.json, the job's output or `report`."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web
from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.generate.sampling import Sampling
from specpilot.secrets import MASK, mask_fields, mask_log_text
from tests.generate.conftest import scripted_server, write_jsonl

API_KEY = "sk-PLANTED-quoted-5d1e"
BODY_KEY = "bk-PLANTED-extra-8c3f"
PASSWORD = "pw-PLANTED-url-2b7a"
BASIC = base64.b64encode(f"trainer:{PASSWORD}".encode()).decode()  # the URL's password as sent
PLANTED = (API_KEY, BODY_KEY, PASSWORD, BASIC)


async def _chat(request: web.Request) -> web.Response:
    body = await request.json()
    prompt = body["messages"][-1]["content"]
    auth = request.headers.get("Authorization", "")
    if "Q400" in prompt:  # OpenAI's words for a refused key, the key quoted
        return web.json_response({"error": f"Incorrect API key provided: {auth.split()[-1]}"}, status=400)
    if "Q500" in prompt:  # a crash page echoing the request and its headers
        return web.Response(status=500, text=f"Internal error; headers={dict(request.headers)} body={body}")
    answer = {"role": "assistant", "content": "ok", "reasoning_content": "r"}
    return web.json_response(
        {
            "choices": [{"message": answer, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2},
        }
    )


@pytest.fixture
def quoting_server() -> Iterator[int]:
    with scripted_server(_chat) as port:
        yield port


@pytest.mark.parametrize("with_password", [False, True])
def test_keys_quoted_back_are_kept_out_of_everything(
    tmp_path: Path, quoting_server: int, monkeypatch: pytest.MonkeyPatch, with_password: bool
) -> None:
    monkeypatch.setenv("SPECPILOT_API_KEY", API_KEY)
    rows = [{"id": f"r{i}", "prompt": p} for i, p in enumerate(["hello", "Q400 please", "Q500 please"])]
    inputs = write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out"
    user = f"trainer:{PASSWORD}@" if with_password else ""
    server = f"http://{user}127.0.0.1:{quoting_server}"
    extra = json.dumps({"api_key": BODY_KEY, "ignore_eos": False})
    args = ["--input", str(inputs), "--output", str(out), "--server", server, "--model", "m"]
    args += ["--extra-body", extra, "--max-attempts", "2", "--retry-base-s", "0"]
    runner = CliRunner()
    outputs = {"generate": runner.invoke(cli, ["generate", *args])}
    assert outputs["generate"].exit_code == 1, outputs["generate"].output  # two rows failed
    outputs["report"] = runner.invoke(cli, ["report", str(out), "--json"])
    errors = [json.loads(line) for line in (out / "errors.jsonl").read_text().splitlines()]
    assert len(errors) == 2 and all(MASK in e["error"] for e in errors), errors  # said, masked
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["params"]["request_fields"] == {"api_key": MASK, "ignore_eos": False}
    for path in out.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert not [s for s in PLANTED if s.encode() in data], path
    for what, result in outputs.items():
        assert not [s for s in PLANTED if s in result.output], (what, result.output)


@pytest.mark.parametrize(
    "text",
    [
        f"Authorization: Bearer {API_KEY}",
        f'{{"headers": {{"Authorization": "Bearer {API_KEY}"}}}}',
        f"api_key: {API_KEY}",
        f"  hf_token: '{API_KEY}'",
        f"export HF_TOKEN={API_KEY}",
        f"--api-key={API_KEY}",
        f"--api-key {API_KEY}",
        f"pulling https://bob:{API_KEY}@hub.example/m",
        f'{{"error": "Incorrect API key provided: {API_KEY}"}}',
    ],
)
def test_every_shape_of_a_key_is_masked(text: str) -> None:
    shown = mask_log_text(text)
    assert API_KEY not in shown and MASK in shown


def test_extra_body_fields_named_like_secrets_are_masked() -> None:
    fields = {
        "api_key": BODY_KEY,
        "nested": {"hf_token": BODY_KEY},
        "max_tokens": 5,
        "url": f"https://u:{PASSWORD}@h",
    }
    assert BODY_KEY not in json.dumps(mask_fields(fields)) and PASSWORD not in json.dumps(mask_fields(fields))
    assert mask_fields(fields)["max_tokens"] == 5  # type: ignore[index]
    recorded = Sampling(thinking=True, request_fields=fields).to_json()  # bench.json's "sampling"
    assert BODY_KEY not in json.dumps(recorded) and PASSWORD not in json.dumps(recorded)
