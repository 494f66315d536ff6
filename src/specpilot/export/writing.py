"""What a format's writer is given and returns (the same for every format)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specpilot.generate.writers.parts import CLEAN, FLAGGED, Split

#: told the rows written so far, after each part (off a terminal: a progress line)
RowsDone = Callable[[int], object]


@dataclass(frozen=True)
class WriteRequest:
    directory: Path  # the job folder
    target: Path  # where the writer writes (a temporary name, renamed onto the export's target)
    include_flagged: bool
    per_turn: bool  # formats that split turns: one row per target turn (`rows.turn_rows`)
    done: RowsDone

    @property
    def splits(self) -> tuple[Split, ...]:
        return (CLEAN, FLAGGED) if self.include_flagged else (CLEAN,)


@dataclass
class Written:
    files: list[Path]
    rows: int  # records written
    left_out: int = 0  # stored rows that became no record
