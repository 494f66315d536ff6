"""The list of commands `specpilot` offers; each lives in its concern's module."""

from __future__ import annotations

import click

ALL: list[click.Command] = []
