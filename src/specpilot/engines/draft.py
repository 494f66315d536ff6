"""How an engine names its speculative methods and writes k draft tokens (`specpilot bench`'s
variants): one `DraftKnobs` per engine, carried by its adapter."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specpilot.engines.argv import ReadArgv


@dataclass(frozen=True)
class DraftKnobs:
    """How one engine names its speculative method and writes k draft tokens."""

    methods: frozenset[str]
    #: the method the spec's flags turn on, if any
    method_of: Callable[[ReadArgv], str | None]
    #: the draft tokens the spec's flags give (0 when they leave it to the engine)
    draft_tokens_of: Callable[[ReadArgv], int]
    #: the flags that set `method` at k draft tokens (replacing the same flags where given)
    args_for: Callable[[ReadArgv, str, int], tuple[str, ...]]
    case_sensitive: bool
    #: the flag that caps the requests the engine runs at once (bench's concurrency axis)
    running_cap_flag: str
    #: the flag of the share of GPU memory the engine takes (bench steps it down where a lower
    #: running cap changes what the engine allocates)
    memory_fraction_flag: str
    #: the on/off flag of the engine's own adaptive speculation (off at large batches); bench
    #: explores it where the release's flag table has it
    adaptive_flag: str | None = None
