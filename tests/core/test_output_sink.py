"""The CLI's one output sink: `--json` gives one JSON object on stdout and the steps on
stderr; without it the result renders itself on stdout, the steps beside it; an error is one
line and exit 2 in both forms."""

from __future__ import annotations

import json
from typing import Any

import click
import pytest
from click.testing import CliRunner

from specpilot.cli import _Group
from specpilot.cli.output import Human, Output, json_option
from specpilot.errors import UserError


class Answer:
    """A result as a command builds one."""

    def __init__(self, value: float) -> None:
        self.value = value

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "unit": "GiB"}

    def human(self, out: Human) -> None:
        out.line(f"value {self.value} GiB")
        out.console(highlight=False).print("[bold]done[/]")
        out.line("a warning", err=True)


@click.command("sample")
@click.option("--bad", is_flag=True)
@click.option("--fail", is_flag=True)
@json_option("Print one JSON object.")
def sample(bad: bool, fail: bool, out: Output) -> None:
    out.step("step one")
    out.steps.print("[green]step two[/]")
    out.note("status page: http://127.0.0.1:1/")
    if bad:
        raise UserError("must be positive", field="--size", fix="give a size over 0")
    if fail:
        out.fail(UserError("no such job", field="JOB.toml", fix="name a job file"), output="out/")
    out.show(Answer(float("nan")))


class _SampleGroup(_Group):
    """specpilot's own group (its error handling) with the sample as its one command."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return ["sample"]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return sample if cmd_name == "sample" else None


@click.group(cls=_SampleGroup)
def group() -> None:
    pass


def _run(*args: str) -> Any:
    return CliRunner().invoke(group, ["sample", *args], catch_exceptions=False)


def test_json_is_one_object_on_stdout_and_the_steps_on_stderr() -> None:
    result = _run("--json")
    assert result.exit_code == 0
    # strict JSON: the NaN is null, with the reason
    assert json.loads(result.stdout) == {
        "value": None,
        "unit": "GiB",
        "null_reasons": {"value": "nan is not a JSON number (undefined)"},
    }
    assert result.stderr == "step one\nstep two\nstatus page: http://127.0.0.1:1/\n"


def test_for_a_person_the_result_renders_itself_on_stdout_beside_the_steps() -> None:
    result = _run()
    assert result.exit_code == 0
    assert result.stdout == "step one\nstep two\nvalue nan GiB\ndone\n"
    assert result.stderr == "status page: http://127.0.0.1:1/\na warning\n"


@pytest.mark.parametrize("form", [[], ["--json"]])
def test_a_bad_input_is_one_line_and_exit_2_in_both_forms(form: list[str]) -> None:
    result = _run("--bad", *form)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == "error: --size: must be positive (give a size over 0)"
    assert "value" not in result.stdout


def test_a_failure_under_json_is_an_object_on_stdout_and_the_same_one_line() -> None:
    as_json = _run("--fail", "--json")
    human = _run("--fail")
    line = "error: JOB.toml: no such job (name a job file)"
    assert (as_json.exit_code, human.exit_code) == (2, 2)
    assert json.loads(as_json.stdout) == {
        "error": "JOB.toml: no such job",
        "fix": "name a job file",
        "exit": 2,
        "output": "out/",
    }
    assert as_json.stderr.splitlines()[-1] == human.stderr.splitlines()[-1] == line
    assert human.stdout == "step one\nstep two\n"


@click.command("watch")
@json_option("Print one JSON object.")
def watch(out: Output) -> None:
    console = out.human_steps
    if console is not None:
        console.print("[bold]watching[/] the start")
    out.show(Answer(1.0))


@pytest.mark.parametrize("as_json", [False, True])
def test_human_steps_are_for_a_person_only(as_json: bool) -> None:
    """What a person watches as it happens (`up`'s live line, each start's outcome) is on stdout
    for a person and nowhere under --json: not even stderr, which a log of the object keeps."""
    result = CliRunner().invoke(watch, ["--json"] if as_json else [], catch_exceptions=False)
    assert result.exit_code == 0
    assert ("watching the start\n" in result.stdout) == (not as_json)
    assert "watching" not in result.stderr
    if as_json:
        assert json.loads(result.stdout) == {"value": 1.0, "unit": "GiB"}
