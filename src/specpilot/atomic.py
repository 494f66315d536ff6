"""A file replaced whole or not at all: written beside its target, flushed to disk, renamed."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def write_text_atomic(path: Path, text: str) -> None:
    """`path` holds `text` or what it held before, never a part. A write that fails (a full
    disk, a signal) removes its `.tmp`; one a kill -9 left is replaced by the next write."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with tmp.open("w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
