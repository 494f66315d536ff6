"""The local record of a fleet: `${SPECPILOT_HOME:-~/.specpilot}/fleets/<name>.json`.

Members are ordinary runs (runs/<fleet>-<i>/state.json); this file adds the router's
process, its URL and which member is registered with it."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from specpilot.errors import UserError
from specpilot.launch.state import check_run_name, home_error, specpilot_home


def fleet_path(name: str) -> Path:
    return specpilot_home() / "fleets" / f"{check_run_name(name)}.json"


def is_fleet(name: str) -> bool:
    try:
        return fleet_path(name).is_file()
    except UserError:
        return False


def fleets_folder() -> Path:
    """The fleet records' folder, made: a read-only or full SPECPILOT_HOME is one line naming it."""
    folder = specpilot_home() / "fleets"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as err:
        raise home_error(err) from None
    return folder


def write_fleet(state: dict[str, Any]) -> None:
    path = fleets_folder() / fleet_path(str(state["name"])).name
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".fleet.")
        with os.fdopen(fd, "w") as out:
            json.dump(state, out, indent=2, sort_keys=True)
            out.write("\n")
        os.replace(tmp, path)
    except OSError as err:
        raise home_error(err) from None


def read_fleet(name: str) -> dict[str, Any]:
    path = fleet_path(name)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise UserError(
            f"no readable fleet record {path} ({err})",
            field="NAME",
            fix="start the fleet with `specpilot up FLEET.toml`",
        ) from None
    if not isinstance(data, dict):
        raise UserError(f"{path} does not hold a JSON object", field="NAME", fix=f"delete {path}")
    return data


def router_replicas(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Each router replica's process: url, pid, start_ticks, log, argv (a record written
    before replicas holds one router in top-level router_* keys)."""
    routers = record.get("routers")
    if isinstance(routers, list):
        return [r for r in routers if isinstance(r, dict)]
    return [
        {
            "url": record.get("router_url"),
            "pid": record.get("router_pid"),
            "start_ticks": record.get("router_start_ticks"),
            "log": record.get("router_log"),
            "argv": record.get("router_argv"),
        }
    ]
