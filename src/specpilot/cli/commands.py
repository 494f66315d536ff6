"""The list of commands `specpilot` offers; each lives in its concern's module."""

from __future__ import annotations

import click

from specpilot.cli.completion import completion
from specpilot.cli.plan import plan

ALL: list[click.Command] = [plan, completion]
