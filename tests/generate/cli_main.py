"""`python -m tests.generate.cli_main generate ...`: the real CLI with the generate commands.

Stands in for `python -m specpilot generate ...` until the commands are registered in
`specpilot.cli.commands.ALL`; the crash test needs a real process to SIGKILL.
"""

from specpilot.cli import cli
from specpilot.cli.generate import COMMANDS

if __name__ == "__main__":
    for command in COMMANDS:
        cli.add_command(command)
    cli.main(prog_name="specpilot")
