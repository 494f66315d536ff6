"""--seed, --stop, --min-p, the penalties and --extra-body reach every request as given; a bad
--extra-body is one line naming it, exit 2; a resume with other fields is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from specpilot.cli import cli
from tests.fakeengines.standin import StandIn
from tests.generate.conftest import prompt_rows, write_jsonl


def generate(tmp_path: Path, server: str, *options: str) -> Result:
    path = write_jsonl(tmp_path / "in.jsonl", prompt_rows(3))
    argv = ["generate", "--input", str(path), "--output", str(tmp_path / "out"), "--server", server,
            "--model", "m", "--json", *options]  # fmt: skip
    return CliRunner().invoke(cli, argv)


def test_the_fields_reach_every_request(tmp_path: Path) -> None:
    server = StandIn().start()
    try:
        options = ["--seed", "7", "--stop", "</s>", "--stop", "###", "--min-p", "0.05",
                   "--presence-penalty", "0.5", "--frequency-penalty", "-0.25", "--repetition-penalty", "1.05",
                   "--extra-body", '{"ignore_eos": false, "chat_template_kwargs": {"x": 1}}']  # fmt: skip
        done = generate(tmp_path, server.url, *options)
        assert done.exit_code == 0, done.output
        again = generate(tmp_path, server.url, *options)  # the same fields: resumes (nothing left)
        assert again.exit_code == 0, again.output
        other = generate(tmp_path, server.url, "--seed", "8")
    finally:
        server.close()
    assert len(server.counts.bodies) == 3
    for body in server.counts.bodies:
        assert (body["seed"], body["stop"], body["min_p"]) == (7, ["</s>", "###"], 0.05)
        assert (body["presence_penalty"], body["frequency_penalty"], body["repetition_penalty"]) == (
            0.5,
            -0.25,
            1.05,
        )
        assert body["ignore_eos"] is False and body["model"] == "m"
        # --thinking (on by default) decides enable_thinking (--extra-body setting it is refused);
        # the body's other template kwargs stay
        assert body["chat_template_kwargs"] == {"x": 1, "enable_thinking": True}
    assert other.exit_code == 2 and "request_fields=" in other.output


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("{oops", "error: --extra-body: is not valid JSON ("),
        ("[1, 2]", "error: --extra-body: is list JSON, not an object"),
        ('{"messages": []}', "error: --extra-body: sets messages, which specpilot sets itself"),
        (
            '{"model": "x", "stream": true}',
            "error: --extra-body: sets model, stream, which specpilot sets itself",
        ),
        ('{"seed": 1}', "error: --extra-body: sets seed, which --seed also sets"),
        # Python's json reads them; the request would carry them, the ledger store them
        ('{"repetition_penalty": NaN}', "error: --extra-body: holds NaN, which is not a finite number"),
        ('{"x": {"y": [-Infinity]}}', "error: --extra-body: holds -Infinity, which is not a finite number"),
        ('{"min_p": 1e999}', "error: --extra-body: holds 1e999, which is not a finite number"),
        (
            '{"chat_template_kwargs": "oops"}',
            "error: --extra-body: sets chat_template_kwargs to str JSON, not an object",
        ),
        (
            '{"chat_template_kwargs": {"enable_thinking": false}}',
            "error: --extra-body: sets chat_template_kwargs.enable_thinking to false, which "
            "--thinking/--no-thinking sets (drop it from --extra-body and pass --no-thinking",
        ),
    ],
)
def test_a_bad_extra_body_is_one_line_and_exit_2(tmp_path: Path, body: str, said: str) -> None:
    extra = ["--seed", "2"] if "--seed" in said else []
    refused = generate(tmp_path, "http://127.0.0.1:9", "--extra-body", body, *extra)
    assert refused.exit_code == 2
    # --json: the refusal's one object on stdout, its one line on stderr
    assert json.loads(refused.stdout)["exit"] == 2
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith(said)
    assert not (tmp_path / "out").exists()  # refused before anything was written


@pytest.mark.parametrize(
    "option",
    [("--min-p", "1.5"), ("--presence-penalty", "3"), ("--repetition-penalty", "0"), ("--seed", "x")],
)
def test_out_of_range_sampling_values_are_usage_errors(tmp_path: Path, option: tuple[str, str]) -> None:
    refused = generate(tmp_path, "http://127.0.0.1:9", *option)
    assert refused.exit_code == 2
    assert refused.output.strip().splitlines()[-1].startswith(f"Error: Invalid value for '{option[0]}'")
