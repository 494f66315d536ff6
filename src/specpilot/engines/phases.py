"""How an engine's startup log marks its phases (weights, pools, graph capture, ready), so that
GPU memory samples of a start can be placed on them (`specpilot.plan.startup_peak`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

#: begin: a phase runs from this line to its end line; end: closes the phase it names;
#: pools_end: closes the allocation of pools that began after the previous marker;
#: ready: the start is over (the warm-up request ran before it)
MarkerKind = Literal["begin", "end", "pools_end", "ready"]


@dataclass(frozen=True)
class StartupPhases:
    """An engine's phase markers, as its adapter carries them."""

    #: (kind, phase) of a marker line, None for any other line
    match_marker: Callable[[str], tuple[MarkerKind, str] | None]
    #: a line stating the engine's own free memory, in GiB, as the group `value`
    free_memory: re.Pattern[str]
