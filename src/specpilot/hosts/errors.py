"""Typed host errors whose messages say what was tried and what to do next.

Why typed: a caller (launch, supervise) reacts differently to "the disk is full"
than to "the host key changed", and a user reads one line that must be enough to
act on. Problems the user fixes in their config (where to connect, how to log in,
which host key to trust) are `UserError`s (exit 2); problems met while working on
a reachable host are `HostError`s (exit 1). Every class here is a `HostError`, so
`except HostError` catches them all.
"""

from __future__ import annotations

from specpilot.errors import SpecpilotError, UserError

TARGET_FIELD = "[host] target"
TARGET_FORMS = "local, ssh://user@host:port, ssh://host, or a Host alias from ~/.ssh/config"


class HostError(SpecpilotError):
    """Something failed on (or on the way to) a host."""


class HostConfigError(UserError, HostError):
    """The user must change how the host is named or reached (exit 2)."""


class BadTarget(HostConfigError):
    """`[host] target` (or its ssh_config / identity file) cannot be used as written."""


class HostUnreachable(HostConfigError):
    """No SSH connection could be made (refused, no route, name unknown, timed out)."""


class AuthRefused(HostConfigError):
    """The server refused every key offered."""


class HostKeyUnknown(HostConfigError):
    """The server's host key is not in known_hosts and accepting new keys is off."""


class HostKeyChanged(HostConfigError):
    """known_hosts holds a different key for this host: possibly a man in the middle."""


class HostConnectionLost(HostError):
    """An established connection dropped while an operation was in flight."""


class DiskFull(HostError):
    """The far side's file system has no room for the file."""


class PermissionDenied(HostError):
    """The host user may not write, read or signal what was asked."""


class RemoteCommandNotFound(HostError):
    """The program (argv[0]) does not exist on the host's PATH."""


class HostTimeout(HostError):
    """A command did not finish within its timeout and was stopped."""


class TransferCorrupted(HostError):
    """The bytes that landed on the far side are not the bytes that were sent."""


class CommandFailed(HostError):
    """A command ran and exited non-zero."""

    def __init__(self, message: str, *, returncode: int, stderr: bytes) -> None:
        self.returncode = returncode
        self.stderr = stderr
        super().__init__(message)


def stderr_tail(stderr: bytes, limit_chars: int = 400) -> str:
    """The end of a command's stderr, one line, for an error message."""
    text = stderr.decode("utf-8", "replace").strip().replace("\n", " | ")
    return text if len(text) <= limit_chars else "…" + text[-limit_chars:]
