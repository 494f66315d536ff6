"""The commands `specpilot` offers, each in its concern's module, imported only when run.

Lazy loading keeps `specpilot plan` from importing the generation client
(aiohttp, pyarrow) or asyncssh: a command starts in a fraction of a second.
"""

from __future__ import annotations

#: command name -> "module:attribute", in the order `--help` lists them
COMMANDS: dict[str, str] = {
    "check": "specpilot.cli.check:check",
    "plan": "specpilot.cli.plan:plan",
    "up": "specpilot.cli.up:up",
    "status": "specpilot.cli.up:status",
    "logs": "specpilot.cli.up:logs",
    "down": "specpilot.cli.up:down",
    "fleet-repair": "specpilot.cli.fleet:fleet_repair",
    "runs": "specpilot.cli.runs:runs",
    "bench": "specpilot.cli.bench:bench",
    "generate": "specpilot.cli.generate:generate",
    "report": "specpilot.cli.generate:report",
    "export": "specpilot.cli.generate:export",
    "verify": "specpilot.cli.verify:verify",
    "job": "specpilot.cli.job:job",
    "view": "specpilot.cli.view:view",
    "demo": "specpilot.cli.demo:demo",
    "completion": "specpilot.cli.completion:completion",
}
