"""Places a server can run: this machine (`LocalHost`) or an SSH host (`SSHHost`).

`open_host` turns `[host]` settings into a Host; an SSH connection is made on the
first operation (and made again after a drop), so its errors surface there.
"""

from __future__ import annotations

from specpilot.hosts.base import Host
from specpilot.hosts.local import LocalHost
from specpilot.hosts.ssh import SSHHost
from specpilot.hosts.target import parse_target

__all__ = ["Host", "LocalHost", "SSHHost", "open_host"]


def open_host(
    target: str,
    *,
    identity_file: str | None = None,
    known_hosts: str | None = None,
    ssh_config: str | None = None,
    accept_new_host_key: bool = False,
) -> Host:
    """The Host for `[host] target`; BadTarget (a UserError) if the target is malformed."""
    parsed = parse_target(target)
    if parsed.kind == "local":
        return LocalHost()
    return SSHHost(
        parsed,
        identity_file=identity_file,
        known_hosts=known_hosts,
        ssh_config=ssh_config,
        accept_new_host_key=accept_new_host_key,
    )
