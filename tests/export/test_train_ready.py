"""The export's train-ready check: a sample of the exported rows, rendered with the trainer's chat
template and re-tokenized, gives each target turn the completion_tokens the server reported, or
the first row that does not is named; without a readable tokenizer it says it skipped."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from specpilot.cli import cli
from specpilot.demo import tinymodel
from specpilot.errors import UserError
from specpilot.job.pipeline import _export, serve
from specpilot.job.record import JobRecord
from specpilot.job.spec import JobFile, load_job
from tests.conformance.trainers_harness import QWEN35_STYLE_TEMPLATE
from tests.fakeengines.standin import Faults, StandIn, answer_for
from tests.fixtures.jobs import run_generate
from tests.generate.test_job import _config

#: two rows of two target turns, three of one
INPUT = [
    {
        "id": f"m{i}",
        "conversations": [
            {"role": "user", "content": f"first {i}"},
            {"role": "assistant", "content": "given"},
            {"role": "user", "content": f"second {i}"},
        ],
    }
    for i in range(2)
] + [{"id": f"s{i}", "conversations": [{"role": "user", "content": f"single {i}"}]} for i in range(3)]


def write_tokenizer(folder: Path, chat_template: str) -> Path:
    """The demo model's tiny byte-level BPE (its corpus and tokens), saved as a model folder's
    tokenizer.json and tokenizer_config.json with `chat_template`; nothing downloaded."""
    folder.mkdir(parents=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=tinymodel.VOCAB_SIZE - len(tinymodel.PLAIN_ADDED_TOKENS),
        special_tokens=list(tinymodel.SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(tinymodel.training_text(), trainer=trainer)
    tokenizer.add_tokens(list(tinymodel.PLAIN_ADDED_TOKENS))
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {
        "eos_token": tinymodel.IM_END,
        "pad_token": tinymodel.END_OF_TEXT,
        "chat_template": chat_template,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="module")
def qwen35(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model folder whose template renders reasoning as Qwen3.5/3.6's does."""
    return write_tokenizer(tmp_path_factory.mktemp("model") / "qwen35", QWEN35_STYLE_TEMPLATE)


def generate(folder: Path, model: str, tokenizer: Path, **faults: Any) -> Path:
    """A job of INPUT whose server counts its answers with `tokenizer`; the ledger names `model`."""
    server = StandIn(Faults(tokenizer=str(tokenizer / "tokenizer.json"), **faults)).start()
    try:
        assert run_generate(_config(folder, [server], 0, input_rows=INPUT, model=model)).exit_code == 0
    finally:
        server.close()
    return folder / "out"


def export(job: Path, *args: str) -> tuple[Result, dict[str, Any]]:
    shown = CliRunner().invoke(cli, ["export", str(job), *args, "--json"])
    return shown, json.loads(shown.stdout)


def count(tokenizer: Path, text: str) -> int:
    return len(
        Tokenizer.from_file(str(tokenizer / "tokenizer.json")).encode(text, add_special_tokens=False).ids
    )


def test_rows_whose_tokens_match_pass(tmp_path: Path, qwen35: Path) -> None:
    job = generate(tmp_path, str(qwen35), qwen35)  # the ledger's model is the local folder
    shown, told = export(job, "--format", "specforge", "--chat-template", "qwen3.5")
    assert shown.exit_code == 0, shown.output
    checked = told["train_ready"]
    assert checked["rendered_with"] == "SpecForge's qwen3.5 over the model's chat template"
    assert (checked["checked_rows"], checked["checked_turns"], checked["mismatches"]) == (5, 7, 0)
    # the server counts the stop token <|im_end|> it wrote; the template's newline after it is its own
    assert (checked["end_of_turn"], checked["end_of_turn_tokens"]) == ("<|im_end|>\n", 2)
    assert checked["first_mismatch"] is None
    shown, told = export(job, "--format", "speculators")  # the model's own template
    assert shown.exit_code == 0, shown.output
    assert told["train_ready"]["rendered_with"] == "the model's chat template"
    assert (told["train_ready"]["checked_turns"], told["train_ready"]["mismatches"]) == (7, 0)
    person = CliRunner().invoke(cli, ["export", str(job), "--format", "parquet"])
    assert person.exit_code == 0
    assert (
        "train-ready check: 7 target turns of 5 rows rendered with the model's chat template" in person.stdout
    )


def test_reasoning_the_row_lost_names_the_first_row(tmp_path: Path, qwen35: Path) -> None:
    # the server's reasoning in a field the client does not read: the rows keep no reasoning,
    # while completion_tokens counts it
    job = generate(tmp_path, str(qwen35), qwen35, reasoning_field="thoughts")
    shown, told = export(job, "--format", "specforge", "--chat-template", "qwen3.5", "--include-flagged")
    assert shown.exit_code == 1
    assert (job / "specforge.jsonl").exists()  # written all the same
    checked = told["train_ready"]
    assert checked["mismatches"] == checked["checked_turns"] == 7
    first = checked["first_mismatch"]
    row = next(r for r in INPUT if r["id"] == first["id"])
    content, reasoning = answer_for(row["conversations"][first["turn"] - 1]["content"])
    assert first["reported_tokens"] == count(qwen35, f"{reasoning}\n</think>\n\n{content}<|im_end|>")
    assert first["counted_tokens"] == count(qwen35, f"\n</think>\n\n{content}<|im_end|>\n")
    assert first["side"] == "reasoning" and "no reasoning_content" in first["why"]
    line = (
        f"first: row {first['id']!r} turn {first['turn']}: the trainer sees {first['counted_tokens']} tokens"
    )
    assert line in shown.stderr and "--no-train-check" in shown.stderr
    shown, told = export(
        job,
        "--format",
        "specforge",
        "--include-flagged",
        "--to",
        str(tmp_path / "x.jsonl"),
        "--no-train-check",
    )
    assert shown.exit_code == 0 and told["train_ready"] == {"skipped": "--no-train-check"}


def test_a_template_that_drops_the_reasoning_names_the_first_row(tmp_path: Path, qwen35: Path) -> None:
    # the server wrote reasoning (counted with the same tokens); the model folder's template
    # renders an assistant turn's content only
    plain = write_tokenizer(tmp_path / "plain", tinymodel.CHAT_TEMPLATE)
    job = generate(tmp_path, str(plain), qwen35)
    shown, told = export(job, "--format", "speculators")
    assert shown.exit_code == 1
    first = told["train_ready"]["first_mismatch"]
    assert told["train_ready"]["mismatches"] == 7 and first["counted_tokens"] < first["reported_tokens"]
    assert first["side"] == "reasoning" and "leaves out the turn's reasoning_content" in first["why"]
    # SpecForge's qwen3.5 looks for its header, which this template never writes: nothing in the loss
    shown, told = export(job, "--format", "specforge", "--chat-template", "qwen3.5")
    first = told["train_ready"]["first_mismatch"]
    assert shown.exit_code == 1 and (first["side"], first["counted_tokens"]) == ("template", 0)
    assert "'<|im_start|>assistant\\n<think>\\n' does not start this turn" in first["why"]


def test_without_a_tokenizer_it_says_it_skipped(tmp_path: Path, qwen35: Path) -> None:
    job = generate(tmp_path, "fake-model", qwen35)
    shown, told = export(job, "--format", "speculators")
    assert shown.exit_code == 0
    assert told["train_ready"] == {
        "skipped": "the job's model 'fake-model' is not a local folder with tokenizer files; "
        "`specpilot export --tokenizer DIR` checks with one"
    }
    person = CliRunner().invoke(cli, ["export", str(job), "--format", "parquet"])
    assert person.exit_code == 0 and "train-ready check: skipped (the job's model" in person.stderr
    shown, told = export(job, "--format", "hf", "--tokenizer", str(qwen35))  # given: checked with it
    assert shown.exit_code == 0 and told["train_ready"]["checked_turns"] == 7
    refused = CliRunner().invoke(cli, ["export", str(job), "--format", "hf", "--tokenizer", str(tmp_path)])
    assert refused.exit_code == 2
    assert f"--tokenizer: {tmp_path} holds no tokenizer.json or tokenizer_config.json" in refused.stderr


def server_spec(folder: Path, model: Path) -> Path:
    """A local vLLM server spec of `model`."""
    path = folder / "server.toml"
    path.write_text(
        f'name = "m"\n[model]\npath = "{model}"\n[gpu]\nmemory_gib = 79.19\ncount = 1\n'
        '[engine]\nname = "vllm"\nversion = "0.26.0"\n'
    )
    return path


def test_the_jobs_export_records_it_and_fails(tmp_path: Path, qwen35: Path) -> None:
    plain = write_tokenizer(tmp_path / "plain", tinymodel.CHAT_TEMPLATE)
    job = generate(tmp_path, "fake-model", qwen35)  # the tokenizer is found through the server spec
    server = server_spec(tmp_path, plain)
    spec = JobFile(tmp_path / "job.toml", server, None, tmp_path / "in.jsonl", job, export=("speculators",))
    record, said = JobRecord(job / "job.json", {}), []
    why = _export(spec, record, said.append)
    stage = record.stage("export")
    checked = stage["evidence"]["formats"]["speculators"]["train_ready"]
    assert stage["status"] == "failed" and checked["mismatches"] == 7
    assert (
        why.startswith("export speculators: train-ready check: 7 of 7 target turns")
        and "--no-train-check" in why
    )
    assert (job / "speculators.jsonl").exists()
    assert any(line.startswith("export speculators: train-ready check: 7 of 7") for line in said)


def test_a_job_whose_export_fails_the_check_ends_with_why(tmp_path: Path, qwen35: Path) -> None:
    """The job's end says why it failed (before, "job done: ..." with exit 1)."""
    plain = write_tokenizer(tmp_path / "plain", tinymodel.CHAT_TEMPLATE)
    job = generate(tmp_path, "fake-model", qwen35)
    server = server_spec(tmp_path, plain)
    spec = JobFile(tmp_path / "job.toml", server, None, tmp_path / "in.jsonl", job, export=("speculators",))
    record = JobRecord(job / "job.json", {"stages": {"generate": {"status": "done"}}})
    result = asyncio.run(serve(spec, record, lambda line: None))
    assert result.exit_code == 1
    assert result.message.startswith("export speculators: train-ready check: 7 of 7 target turns")
    assert record.stage("down")["status"] == "done"  # nothing the job started is left running


def test_the_job_key_turns_it_off(tmp_path: Path, qwen35: Path) -> None:
    plain = write_tokenizer(tmp_path / "plain", tinymodel.CHAT_TEMPLATE)
    job = generate(tmp_path, str(plain), qwen35)  # rows that fail it
    server_spec(tmp_path, plain)
    job_file = tmp_path / "job.toml"
    job_file.write_text(
        '[job]\nserver = "server.toml"\nprompts = "in.jsonl"\noutput = "out"\nexport = ["speculators"]\n'
        "train_check = false\n"
    )
    spec = load_job(job_file)
    record = JobRecord(job / "job.json", {})
    assert _export(spec, record, lambda line: None) == ""
    stage = record.stage("export")
    assert stage["status"] == "done"
    assert stage["evidence"]["formats"]["speculators"]["train_ready"] == {
        "skipped": "[job] train_check = false"
    }
    job_file.write_text(job_file.read_text().replace("false", '"no"'))
    with pytest.raises(UserError, match=r"\[job\] train_check: must be a bool"):
        load_job(job_file)
