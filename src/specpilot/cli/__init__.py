"""The `specpilot` command line.

Each concern registers its commands from its own module (`cli/plan.py`,
`cli/up.py`, ...); this module only builds the group and maps errors to exit
codes: 0 ok, 1 the check or the job failed, 2 bad input.
"""

from __future__ import annotations

import importlib
import traceback

import click

from specpilot import __version__
from specpilot.errors import EXIT_FAILED, Interrupted, JobFailed, SpecpilotError


class _Group(click.Group):
    """Loads commands on first use; turns specpilot errors into one line and an exit code."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        from specpilot.cli.commands import COMMANDS

        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        from specpilot.cli.commands import COMMANDS

        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, _, attribute = target.partition(":")
        command = getattr(importlib.import_module(module_name), attribute)
        assert isinstance(command, click.Command)
        return command

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        from specpilot.cli.output import Output

        out = Output("--json" in args[: args.index("--") if "--" in args else None])  # parsing consumes args
        try:
            return super().parse_args(ctx, args)
        except click.ClickException as err:  # an option of specpilot itself (`--badopt`)
            out.usage_error(err, "")
            raise

    def invoke(self, ctx: click.Context) -> object:
        from specpilot.cli.output import Output

        args = [*ctx._protected_args, *ctx.args]
        # under --json a refusal is the one JSON object on stdout, whichever layer refused
        out = Output("--json" in args[: args.index("--") if "--" in args else None])
        try:
            return super().invoke(ctx)
        except SpecpilotError as err:
            if ctx.meta.get("specpilot.debug"):
                traceback.print_exc()
            out.refusal(err)
            click.echo(f"error: {err}", err=True)
            ctx.exit(err.exit_code)
        except click.ClickException as err:
            from specpilot.cli.commands import COMMANDS

            # an unknown command's own --help does not exist: the group's lists the commands
            out.usage_error(err, args[0] if args and args[0] in COMMANDS else "")
            raise
        except (click.exceptions.Exit, click.Abort, SystemExit):
            raise
        except KeyboardInterrupt:
            # a command that takes no signal itself: under --json the object still
            interrupted = Interrupted("interrupted")
            out.refusal(interrupted, fix="run the same command again")
            click.echo(interrupted, err=True)
            ctx.exit(interrupted.exit_code)
        except Exception as err:
            # A bug, not a user mistake: still one line unless --debug asks for more.
            if ctx.meta.get("specpilot.debug"):
                traceback.print_exc()
            line = f"unexpected {type(err).__name__}: {err}"
            fix = "rerun with --debug for the traceback, and please report it"
            out.refusal(JobFailed(line), fix=fix)
            click.echo(f"error: {line} ({fix})", err=True)
            ctx.exit(EXIT_FAILED)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="specpilot")
@click.option("--debug", is_flag=True, help="Show full tracebacks for errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Plan, check, launch and drive SGLang/vLLM servers for drafter data generation.

    \b
    Example:
      specpilot plan examples/qwen36-27b-mtp-sglang.toml
    """
    ctx.meta["specpilot.debug"] = debug


def main() -> None:
    # click exits 2 on its own usage errors, matching EXIT_BAD_INPUT.
    cli.main(standalone_mode=True)
