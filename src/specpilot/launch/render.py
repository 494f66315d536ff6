"""The launch script and the env file, rendered from argv and env (never hand-built shell).

launch.sh holds no logic: `exec` of the argv quoted by `shlex.join`, so the engine
replaces the shell and keeps the pid that was recorded. The env file is a record
of the environment (one NAME=value a line); values with a newline cannot be
expressed in that format and are refused.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

from specpilot.errors import UserError

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def render_launch_script(argv: Sequence[str], env_refs: Mapping[int, tuple[str, str]] | None = None) -> bytes:
    """`exec` of argv; `env_refs[i] = (prefix, NAME)` writes word i as prefix + "${NAME}".

    That is how a secret flag value (`--api-key X`) reaches the engine without being
    written into launch.sh: the value travels in the process environment.
    """
    if not argv:
        raise ValueError("empty argv")
    refs = env_refs or {}
    words = [
        (shlex.quote(refs[i][0]) if refs[i][0] else "") + f'"${{{refs[i][1]}}}"'
        if i in refs
        else shlex.quote(arg)
        for i, arg in enumerate(argv)
    ]
    return f"#!/usr/bin/env bash\nexec {' '.join(words)}\n".encode()


def render_env_file(env: Mapping[str, str]) -> bytes:
    lines = []
    for name in sorted(env):
        value = env[name]
        if not _ENV_NAME.match(name):
            raise UserError(
                f"{name!r} is not a valid variable name",
                field="[engine] env",
                fix="use letters, digits and _, not starting with a digit",
            )
        if "\n" in value or "\0" in value:
            raise UserError(
                f"the value of {name} contains a newline",
                field=f"[engine] env {name}",
                fix="put a multi-line value in a file on the host and pass its path",
            )
        lines.append(f"{name}={value}\n")
    return "".join(lines).encode()
