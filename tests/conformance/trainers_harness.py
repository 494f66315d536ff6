"""Runs SpecForge's and speculators' own data code on specpilot's export (inside the trainers venv).

    TRAINERS_PYTHON trainers_harness.py --specforge F... --speculators F... --work DIR --max-length N

Writes DIR/samples.json (the trainers print their own progress on stdout): for each
file given (`--specforge` and `--speculators` repeat), every training sample as the
trainer built it: the decoded text of its tokens and the decoded text of each run of
tokens its loss mask supervises. The test compares these with what the server was sent and
answered.

* SpecForge: `specforge.data.prompt_builder.prepare_prompt_tasks`, the path
  `specforge train` takes for `data.train_data_path`, with `--chat-template qwen3.5`;
  it tokenizes and masks through `build_eagle3_dataset`, the function the offline
  `scripts/prepare_hidden_states.py` path uses too.
* speculators: `load_raw_dataset` + `build_speculator_training_dataset`, the path of
  `speculators prepare-data`. It tokenizes through vLLM's `/v1/chat/completions/render`
  endpoint; a stand-in here serves that endpoint by applying the same tokenizer's
  chat template (vLLM's render does exactly that for a text model).

The tokenizer is the tiny demo tokenizer (built locally, nothing downloaded) with a
chat template shaped like Qwen3.5's/3.6's (and Qwen3's): an assistant turn after the last
user turn renders `<think>\n` + its reasoning + `\n</think>\n\n` before its answer (the
last one always, others when they have reasoning); an earlier one renders its answer
alone, with no think block; the generation prompt opens `<think>`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

TINYMODEL = Path(__file__).resolve().parents[2] / "src" / "specpilot" / "demo" / "tinymodel.py"

# As Qwen3.x templates do (Qwen3.6 with its default preserve_thinking=false): the assistant
# turns after the last user turn show their reasoning (the last one always); earlier ones
# render their answer alone, so SpecForge's `<|im_start|>assistant\n<think>\n` header does
# not match them.
QWEN35_STYLE_TEMPLATE = (
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}"
    "{%- endfor -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{%- set reasoning = message['reasoning_content'] or '' -%}"
    "{%- if loop.index0 > ns.last_user and (loop.last or reasoning) -%}"
    "{{- '<|im_start|>assistant\\n<think>\\n' + reasoning + '\\n</think>\\n\\n'"
    " + message['content'] + '<|im_end|>\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>assistant\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n<think>\\n' -}}{%- endif -%}"
)


def build_tokenizer(directory: Path) -> Any:
    spec = importlib.util.spec_from_file_location("tinymodel", TINYMODEL)
    assert spec is not None and spec.loader is not None
    tinymodel = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tinymodel)
    tokenizer = tinymodel.build_tokenizer(directory)
    tokenizer.chat_template = QWEN35_STYLE_TEMPLATE
    tokenizer.save_pretrained(str(directory))
    return tokenizer


def described(tokenizer: Any, input_ids: list[int], loss_mask: list[int]) -> dict[str, Any]:
    """The sample's text and the text of each supervised run of tokens."""
    spans: list[str] = []
    start = None
    for index, bit in enumerate([*loss_mask, 0]):
        if bit and start is None:
            start = index
        elif not bit and start is not None:
            spans.append(tokenizer.decode(input_ids[start:index]))
            start = None
    return {"text": tokenizer.decode(input_ids), "supervised": spans, "tokens": len(input_ids)}


def specforge_samples(path: Path, tokenizer: Any, max_length: int) -> list[dict[str, Any]]:
    from specforge.data.prompt_builder import prepare_prompt_tasks

    tasks = prepare_prompt_tasks(
        path,
        tokenizer,
        chat_template="qwen3.5",
        max_length=max_length,
        is_preformatted=False,
        train_only_last_turn=False,
        cache_dir=None,
        cache_key=None,
        num_proc=1,
    )
    return [described(tokenizer, t["payload"]["input_ids"], t["payload"]["loss_mask"]) for t in tasks]


class _Render(BaseHTTPRequestHandler):
    tokenizer: Any = None

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        text = self.tokenizer.apply_chat_template(
            body["messages"],
            tools=body.get("tools"),
            add_generation_prompt=body["add_generation_prompt"],
            tokenize=False,
        )
        ids = self.tokenizer.encode(text, add_special_tokens=False)[: body.get("truncate_prompt_tokens")]
        payload = json.dumps({"token_ids": ids}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


def speculators_samples(path: Path, tokenizer: Any, max_length: int) -> list[dict[str, Any]]:
    from speculators.data_generation.preprocessing import build_speculator_training_dataset, load_raw_dataset

    _Render.tokenizer = tokenizer
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Render)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        raw, _ = load_raw_dataset(str(path))
        dataset = build_speculator_training_dataset(
            raw,
            tokenizer,
            max_length=max_length,
            num_proc=1,
            render_endpoint=f"http://127.0.0.1:{server.server_address[1]}",
        )
    finally:
        server.shutdown()
    return [described(tokenizer, row["input_ids"].tolist(), row["loss_mask"].tolist()) for row in dataset]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--specforge", type=Path, action="append", default=[])
    parser.add_argument("--speculators", type=Path, action="append", default=[])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--max-length", type=int, required=True)
    args = parser.parse_args()
    tokenizer = build_tokenizer(args.work / "tokenizer")
    result = {str(path): specforge_samples(path, tokenizer, args.max_length) for path in args.specforge}
    for path in args.speculators:
        result[str(path)] = speculators_samples(path, tokenizer, args.max_length)
    (args.work / "samples.json").write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
