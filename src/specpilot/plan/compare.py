"""The same spec without speculative decoding, so a plan can be shown next to its plain twin.

Flags are found as the release's parser reads them (engines/argv.py), so an abbreviated
or `--flag=value` spelling is dropped with its value like any other.
"""

from __future__ import annotations

from specpilot.engines.argv import read_argv
from specpilot.engines.flags import parse_version
from specpilot.engines.registry import table_for
from specpilot.spec import Spec

#: flags that turn speculative decoding on or tune it (prefixes, both engines)
SPECULATIVE_PREFIXES = ("--speculative",)
#: flags a speculative launch forces on that a plain launch leaves to the engine (SGLang hybrids)
FORCED_BY_SPECULATION = ("--mamba-scheduler-strategy", "--mamba-radix-cache-strategy")


def _dropped(flag: str) -> bool:
    return flag.startswith(SPECULATIVE_PREFIXES) or flag in FORCED_BY_SPECULATION


def without_speculation(spec: Spec) -> Spec | None:
    """The spec minus its speculative flags; None when it has none."""
    table = table_for(spec.engine.name, parse_version(spec.engine.version))
    read = read_argv(table, spec.engine.args)
    if not any(_dropped(use.spelling) for use in read.uses):
        return None
    kept = read.without(lambda use: _dropped(use.spelling))
    return spec.model_copy(update={"engine": spec.engine.model_copy(update={"args": kept})})
