"""A file written whole or not at all leaves no temp file beside it, however the write ends."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from specpilot.atomic import write_text_atomic


@pytest.mark.parametrize(
    "ended_by",
    [OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt()],
    ids=["full-disk", "signal"],
)
def test_a_write_that_fails_leaves_the_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ended_by: BaseException
) -> None:
    """A signal or a full disk mid-write left a 0-byte `job.json.tmp` in the job folder."""
    path = tmp_path / "job.json"
    path.write_text("old\n")

    def fails(fd: int) -> None:
        raise ended_by

    monkeypatch.setattr(os, "fsync", fails)
    with pytest.raises(type(ended_by)):
        write_text_atomic(path, "new\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.json"]
    assert path.read_text() == "old\n"


def test_a_temp_a_kill_left_is_gone_after_the_next_write(tmp_path: Path) -> None:
    """kill -9 mid-write cannot clean up: the next write of the file takes its temp's place."""
    path = tmp_path / "job.json"
    (tmp_path / "job.json.tmp").write_text("")
    write_text_atomic(path, "new\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.json"]
    assert path.read_text() == "new\n"
