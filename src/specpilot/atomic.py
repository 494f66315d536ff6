"""A file replaced whole or not at all: written beside its target, flushed to disk, renamed."""

from __future__ import annotations

import os
from pathlib import Path


def write_text_atomic(path: Path, text: str) -> None:
    """`path` holds `text` or what it held before, never a part: a crash mid-write leaves the
    old file (and a `.tmp` beside it that the next write replaces)."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
