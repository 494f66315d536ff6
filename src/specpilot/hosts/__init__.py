"""Places a server can run: this machine (`LocalHost`) or an SSH host (`SSHHost`).

`open_host_section` turns a `[host]` section into a Host (`open_host` takes its fields one
by one); an SSH connection is made on the first operation (and made again after a drop), so
its errors surface there. `memory.py`'s `MemoryHost` holds one in memory, for tests of the
code above the host.
"""

from __future__ import annotations

from typing import Protocol

from specpilot.hosts.base import Host
from specpilot.hosts.local import LocalHost
from specpilot.hosts.ssh import SSHHost
from specpilot.hosts.target import parse_target

__all__ = ["Host", "HostSettings", "LocalHost", "SSHHost", "open_host", "open_host_section"]


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


class HostSettings(Protocol):
    """A `[host]` section (`specpilot.spec.HostSection`; this layer does not import the spec)."""

    @property
    def target(self) -> str: ...
    @property
    def identity_file(self) -> str | None: ...
    @property
    def known_hosts(self) -> str | None: ...
    @property
    def ssh_config(self) -> str | None: ...
    @property
    def accept_new_host_key(self) -> bool: ...


def open_host_section(section: HostSettings) -> Host:
    """The Host a spec's `[host]` section (or a run state's copy of it) names."""
    return open_host(
        section.target,
        identity_file=section.identity_file,
        known_hosts=section.known_hosts,
        ssh_config=section.ssh_config,
        accept_new_host_key=section.accept_new_host_key,
    )
