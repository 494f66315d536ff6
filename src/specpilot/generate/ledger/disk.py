"""An OSError while `export`, `report` or `view` reads or writes files, as one line with its fix."""

from __future__ import annotations

import errno
from pathlib import Path

from specpilot.errors import DiskFull, UserError

#: errnos that mean "this place cannot be written" (a read-only mount, permissions)
NOT_WRITABLE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


def disk_error(err: OSError, path: Path, *, field: str, elsewhere: str, writing: bool = True) -> UserError:
    """`err` as a UserError naming the file (`path` if the error names none); `elsewhere` is
    the way around it, e.g. "pass --to a folder on another disk"."""
    where = Path(err.filename) if isinstance(err.filename, str) else path
    reason = err.strerror or str(err)
    # pyarrow's OSError carries the text, not always the errno
    if err.errno == errno.ENOSPC or "No space left on device" in str(err):
        return DiskFull(f"the disk holding {where} is full", field=field, fix=f"free space, or {elsewhere}")
    if writing and (err.errno in NOT_WRITABLE or "Read-only file system" in str(err)):
        return UserError(f"{where} is not writable ({reason})", field=field, fix=elsewhere)
    doing = "writing" if writing else "reading"
    return UserError(f"{doing} {where} failed: {reason}", field=field, fix=f"check that path, or {elsewhere}")
