"""One output sink per command: `--json` picks the form once, here, not in each command.

A command builds a result object (its JSON form and its rendering for a person) and hands
it to `Output.show`: under `--json` stdout holds that one JSON object and nothing else; for
a person the object renders itself. Progress lines ("steps") go through the sink too: to
stdout for a person, to stderr under `--json`, so they never mix with the object; a note
(a warning, a status page's address, a job's stages) is on stderr in both forms.
`tests/core/test_one_sink.py` holds the other modules of `cli/` to this.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn, Protocol

import click
from rich.console import Console

from specpilot import jsontext
from specpilot.errors import SpecpilotError, UserError


class Human:
    """Where a result's rendering for a person goes: plain lines or a Rich console, on stdout
    unless `err`. Reached only through `Result.human`, so a JSON run never prints it."""

    def line(self, text: str = "", *, err: bool = False) -> None:
        # click.echo, not Rich: a plain line is never wrapped, nor its brackets read as markup
        click.echo(text, err=err)

    def console(self, *, err: bool = False, **options: Any) -> Console:
        return Console(stderr=err, **options)


class Result(Protocol):
    """What a command shows: its JSON form and its rendering for a person."""

    def to_json(self) -> Any: ...

    def human(self, out: Human) -> None: ...


class Output:
    """The sink of one command, chosen from its `--json` flag."""

    def __init__(self, as_json: bool) -> None:
        self._json = as_json

    def show(self, result: Result, *, indent: int | None = 2) -> None:
        """The result: one JSON object on stdout (strict JSON, `jsontext`; `indent=None`: on one
        line, as `fleet-repair --watch` prints one per pass), or its rendering."""
        if self._json:
            click.echo(jsontext.dumps(result.to_json(), indent=indent))
        else:
            result.human(Human())

    def step(self, text: str) -> None:
        """A progress line: stdout for a person, stderr under --json."""
        click.echo(text, err=self._json)

    @property
    def steps(self) -> Console:
        """A Rich console on the steps' stream, for steps with markup or a library's `say`."""
        return Console(stderr=self._json)

    @property
    def human_steps(self) -> Console | None:
        """A Rich console on stdout for what a person watches as it happens and the JSON form
        leaves out (`up`'s live line, each start's outcome, check's warnings); None under --json."""
        return None if self._json else Console()

    def note(self, text: str) -> None:
        """A line beside the result in both forms (a warning, where a page is served): stderr."""
        click.echo(text, err=True)

    def fail(self, err: SpecpilotError, fix: str | None = None, **context: str) -> NoReturn:
        """A failure the caller reads from stdout under --json: the object {error, fix, exit,
        **context} there (`fix`: one for an error that is no UserError); then, in both forms,
        the error's one line and its exit code."""
        self.refusal(err, fix, **context)
        raise err

    def refusal(self, err: SpecpilotError, fix: str | None = None, **context: str) -> None:
        """Under --json, a refusal or failure as the one object on stdout: {error (the one line
        without its fix), fix, exit, **context}; once per command (the command's own, with its
        context, or the command line's for what the command did not catch)."""
        if isinstance(err, UserError):
            line, fix = (f"{err.field}: {err.message}" if err.field else err.message), err.fix
        else:
            line = str(err)
        self._failure({"error": line, "fix": fix, "exit": err.exit_code, **context})

    def usage_error(self, err: click.ClickException, command: str) -> None:
        """Under --json, a usage error click found (an unknown option, a bad value) as the object."""
        fix = f"see `specpilot {command} --help`" if command else "see `specpilot --help`"
        self._failure({"error": err.format_message(), "fix": fix, "exit": err.exit_code})

    def _failure(self, failure: dict[str, Any]) -> None:
        ctx = click.get_current_context(silent=True)
        if not self._json or (ctx is not None and ctx.meta.get(_SHOWN)):
            return
        if ctx is not None:
            ctx.meta[_SHOWN] = True
        click.echo(jsontext.dumps(failure))


#: ctx.meta key: the failure's JSON object is on stdout already
_SHOWN = "specpilot.failure_shown"


def json_option(help_text: str) -> Callable[[click.decorators.FC], click.decorators.FC]:
    """The `--json` flag, handed to the command as its sink: a parameter `out: Output`."""
    return click.option(
        "--json", "out", is_flag=True, help=help_text, callback=lambda ctx, param, value: Output(bool(value))
    )
