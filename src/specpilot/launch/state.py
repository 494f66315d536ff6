"""The local registry of runs: `${SPECPILOT_HOME:-~/.specpilot}/runs/<name>/state.json`.

It lives on *this* machine even for SSH runs, so `status`, `logs`, `down` and
`generate --run NAME` find the host, the pid and the endpoint from a new shell.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from specpilot.errors import UserError

STATE_FILE = "state.json"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def specpilot_home() -> Path:
    return Path(os.environ.get("SPECPILOT_HOME") or Path.home() / ".specpilot")


def check_run_name(name: str, field: str = "name") -> str:
    if not _NAME.match(name) or name in (".", ".."):
        raise UserError(
            f"run name {name!r} is not usable as a directory name",
            field=field,
            fix="use letters, digits, '.', '_' and '-'",
        )
    return name


def state_path(name: str) -> Path:
    return specpilot_home() / "runs" / check_run_name(name) / STATE_FILE


def write_state(state: dict[str, Any]) -> Path:
    """Write atomically (temp file + rename) so a reader never sees half a file."""
    path = state_path(str(state["name"]))
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".state.")
    with os.fdopen(fd, "w") as out:
        json.dump(state, out, indent=2, sort_keys=True)
        out.write("\n")
    os.replace(tmp, path)
    return path


def read_state(name: str) -> dict[str, Any]:
    path = state_path(name)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(
            f"no run named {name!r} (looked for {path})",
            field="NAME",
            fix="start it with `specpilot up SPEC`, or set SPECPILOT_HOME as when it was started",
        ) from None
    except (ValueError, OSError) as err:
        raise UserError(
            f"{path} is unreadable or not valid JSON ({err})",
            field="NAME",
            fix=f"delete {path.parent} if the run is gone, or start it again with `specpilot up SPEC`",
        ) from None
    if not isinstance(data, dict):
        raise UserError(
            f"{path} does not hold a JSON object",
            field="NAME",
            fix=f"delete {path.parent} if the run is gone, or start it again with `specpilot up SPEC`",
        )
    return data
