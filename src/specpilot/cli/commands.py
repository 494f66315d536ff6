"""The commands `specpilot` offers, each in its concern's module, imported only when run.

Lazy loading keeps `specpilot plan` from importing the generation client
(aiohttp, pyarrow) or asyncssh: a command starts in a fraction of a second.
"""

from __future__ import annotations

#: command name -> "module:attribute", in the order `--help` lists them
COMMANDS: dict[str, str] = {
    "plan": "specpilot.cli.plan:plan",
    "completion": "specpilot.cli.completion:completion",
}
