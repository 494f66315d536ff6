"""The same spec without speculative decoding, so a plan can be shown next to its plain twin.

Flags are removed by name as the engine's own flag table spells them (a boolean flag
takes no value, others take the next token unless written `--flag=value`).
"""

from __future__ import annotations

from specpilot.engines.args import flag_table
from specpilot.spec import Spec

#: flags that turn speculative decoding on or tune it (prefixes, both engines)
SPECULATIVE_PREFIXES = ("--speculative",)
#: flags a speculative launch forces on that a plain launch leaves to the engine (SGLang hybrids)
FORCED_BY_SPECULATION = ("--mamba-scheduler-strategy", "--mamba-radix-cache-strategy")


def _dropped(flag: str) -> bool:
    return flag.startswith(SPECULATIVE_PREFIXES) or flag in FORCED_BY_SPECULATION


def without_speculation(spec: Spec) -> Spec | None:
    """The spec minus its speculative flags; None when it has none."""
    table = flag_table(spec.engine.name, spec.engine.version)
    args = spec.engine.args
    kept: list[str] = []
    index = 0
    removed = False
    while index < len(args):
        token = args[index]
        name, has_value, _ = token.partition("=")
        index += 1
        if not _dropped(name):
            kept.append(token)
            continue
        removed = True
        definition = table.get(name)
        takes_value = definition.kind != "bool" if definition else True
        if not has_value and takes_value and index < len(args) and not args[index].startswith("--"):
            index += 1
    if not removed:
        return None
    return spec.model_copy(update={"engine": spec.engine.model_copy(update={"args": kept})})
