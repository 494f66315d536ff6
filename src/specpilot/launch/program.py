"""Is the engine's program there and executable on the host? Asked before anything is shipped.

Once, a missing or non-executable `[engine] command` was found only when the started
process ended with 127 and was reported as `crash during 'starting'`.
"""

from __future__ import annotations

from specpilot.errors import UserError
from specpilot.hosts.base import Host

# argv: PROGRAM PATH CWD; prints "ok", "missing" or "not_executable" (the way exec finds it:
# a bare name through PATH, a path with a slash from the run folder)
_FIND_SCRIPT = """\
import os, shutil, sys
program, path, cwd = sys.argv[1], sys.argv[2], sys.argv[3]
if "/" not in program:
    found = shutil.which(program, path=path)
    listed = [os.path.join(d, program) for d in path.split(os.pathsep) if d]
    there = any(os.path.exists(p) for p in listed)
    print("ok" if found else ("not_executable" if there else "missing"))
else:
    full = os.path.join(cwd, program)
    if not os.path.exists(full):
        print("missing")
    else:
        print("ok" if os.path.isfile(full) and os.access(full, os.X_OK) else "not_executable")
"""


async def check_program(host: Host, program: str, path: str, cwd: str) -> None:
    """UserError naming `[engine] command` unless `program` is an executable file on the host."""
    result = await host.run(["python3", "-c", _FIND_SCRIPT, program, path, cwd], timeout_s=30.0)
    found = result.stdout.decode().strip()
    if found == "ok":
        return
    where = "local" if host.target == "local" else host.target
    problem = "is not executable" if found == "not_executable" else "is not found"
    raise UserError(
        f"{program!r} {problem} on {where} (PATH={path})",
        field="[engine] command",
        fix="give the engine's full path (e.g. /opt/venv/bin/python3), or chmod +x it",
    )
