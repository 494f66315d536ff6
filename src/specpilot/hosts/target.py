"""Parse `[host] target` into something a connection can be made from.

Three forms, nothing else: `local`; `ssh://[user@]host[:port]`; or a bare name,
which is looked up as a `Host` alias in the ssh_config (HostName, Port, User,
IdentityFile, ProxyJump, UserKnownHostsFile are honoured, as `ssh NAME` would).
A bare name not in any ssh_config is a plain host name, again as `ssh` treats it.
Anything else is refused here, before a connection is attempted, so a typo like
`ssh:/gpu1` is reported as a typo and not as "connection refused".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from specpilot.hosts.errors import TARGET_FIELD, TARGET_FORMS, BadTarget

_URL = re.compile(
    r"""^ssh://
        (?:(?P<user>[A-Za-z0-9._][A-Za-z0-9._-]*)@)?
        (?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9._-]*)
        (?::(?P<port>[^/]*))?
        /?$""",
    re.VERBOSE,
)
_ALIAS = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class Target:
    """A parsed target. For `alias`, host is the alias; ssh_config resolves the rest."""

    raw: str
    kind: Literal["local", "ssh", "alias"]
    host: str | None = None
    port: int | None = None
    user: str | None = None


def _refuse(raw: str, why: str) -> BadTarget:
    return BadTarget(
        f"{raw!r} is not a host target: {why}",
        field=TARGET_FIELD,
        fix=f"use one of: {TARGET_FORMS}",
    )


def parse_target(raw: str) -> Target:
    """Parse a target string; BadTarget (a UserError naming `[host] target`) if malformed."""
    text = raw.strip()
    if text == "local":
        return Target(raw=raw, kind="local")
    if "://" in text or text.startswith("ssh:"):
        if not text.startswith("ssh://"):
            raise _refuse(raw, "only the ssh:// scheme is supported")
        match = _URL.match(text)
        if match is None:
            raise _refuse(raw, "expected ssh://user@host:port")
        port = _parse_port(raw, match.group("port"))
        host = match.group("host").strip("[]")
        return Target(raw=raw, kind="ssh", host=host, port=port, user=match.group("user"))
    if _ALIAS.match(text):
        return Target(raw=raw, kind="alias", host=text)
    raise _refuse(raw, "not `local`, not an ssh:// URL and not a valid alias name")


def _parse_port(raw: str, port_text: str | None) -> int | None:
    if port_text is None:
        return None
    if not (port_text.isascii() and port_text.isdigit()) or not 1 <= int(port_text) <= 65535:
        raise _refuse(raw, f"port {port_text!r} is not a number from 1 to 65535")
    return int(port_text)
