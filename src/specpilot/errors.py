"""The error types every command shares, and the exit code each maps to.

A user mistake (bad spec, bad flag, bad input file, unreachable host) is a
`UserError`: one line that names the field and says what to do, exit code 2.
A check or a job that ran and failed is a `JobFailed`: exit code 1.
Anything else is a bug and shows a traceback only with `--debug`.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
#: ended by SIGINT, SIGTERM or SIGHUP (as a shell reports Ctrl-C)
EXIT_INTERRUPTED = 130


class SpecpilotError(Exception):
    """Base of every error specpilot raises on purpose."""

    exit_code = EXIT_FAILED


class UserError(SpecpilotError):
    """Bad input: names the field (or file, flag, host) and the fix.

    `str(err)` is the single line shown to the user, e.g.
    ``spec.toml: [gpu] memory_gib: must be > 0, got -1 (set it to the GPU's total memory in GiB)``.
    """

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, *, field: str | None = None, fix: str | None = None) -> None:
        self.message = message
        self.field = field
        self.fix = fix
        parts = [f"{field}: {message}" if field else message]
        if fix:
            parts.append(f"({fix})")
        super().__init__(" ".join(parts))


class DiskFull(UserError):
    """A full disk, said as a refusal is (where, and to free space). Refused before a command
    starts its work (exit 2, as any folder it cannot use); a job's stage it stops failed
    (exit 1): no input was wrong, and the same command resumes."""


class JobFailed(SpecpilotError):
    """A check, launch or job ran and did not succeed (exit code 1)."""

    exit_code = EXIT_FAILED


class Interrupted(SpecpilotError):
    """The command was ended by a signal, after stopping what it started (exit code 130)."""

    exit_code = EXIT_INTERRUPTED
