"""`specpilot completion SHELL`: the shell completion script, from click's own machinery."""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class


@click.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> None:
    """Print the shell completion script for SHELL.

    \b
    Example:
      specpilot completion bash > ~/.local/share/bash-completion/completions/specpilot
      eval "$(specpilot completion zsh)"
    """
    root = ctx.find_root().command
    completer_class = get_completion_class(shell)
    if completer_class is None:  # click.Choice already limits SHELL; this is click's own contract
        raise click.BadParameter(shell)
    completer = completer_class(root, {}, "specpilot", "_SPECPILOT_COMPLETE")
    click.echo(completer.source())
