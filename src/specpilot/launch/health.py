"""The endpoint probe, run on the host itself so it works the same for SSH targets
(the server listens on the host's loopback, which this machine cannot reach)."""

from __future__ import annotations

from dataclasses import dataclass

from specpilot.hosts.base import Host
from specpilot.hosts.errors import CommandFailed, HostTimeout, stderr_tail

HEALTH_PATHS = ("/health", "/v1/models")
#: beyond the answer's own time: the host starting the probe's Python (a busy host is slow)
PROBE_STARTUP_S = 5.0

# argv: BASE TIMEOUT_S PATH...; tries each path in order within TIMEOUT_S in all; prints
# "PATH STATUS" for the first answer that is 200, else the last answer (status 0 when nothing
# answered: refused, reset, or not HTTP; "slow" when TIMEOUT_S ran out waiting for one).
# Anything else is a bug: its traceback and exit status reach `probe`.
_PROBE = """\
import http.client, socket, sys, time, urllib.error, urllib.request
base, deadline, paths = sys.argv[1], time.monotonic() + float(sys.argv[2]), sys.argv[3:]
last = "- 0"
for path in paths:
    left = deadline - time.monotonic()
    if left <= 0:
        last = "- slow"; break
    try:
        with urllib.request.urlopen(base + path, timeout=left) as r:
            print(path, r.status); sys.exit(0)
    except urllib.error.HTTPError as e:
        last = f"{path} {e.code}"
    except (TimeoutError, socket.timeout):
        last = f"{path} slow"; break
    except urllib.error.URLError as e:
        last = f"{path} slow" if isinstance(e.reason, (TimeoutError, socket.timeout)) else f"{path} 0"
    except (OSError, http.client.HTTPException):
        last = f"{path} 0"
print(last)
"""


@dataclass(frozen=True)
class HealthAnswer:
    path: str
    status: int  # HTTP status, 0 when nothing answered
    #: no answer came within this many seconds (a busy engine answers late, not never)
    slow_after_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200

    @property
    def state(self) -> str:
        """As `status` says it: the HTTP status, or that the engine is slow to answer."""
        if self.slow_after_s is not None:
            return f"slow to answer ({self.slow_after_s:g} s)"
        return str(self.status) if self.status else "no answer"


async def probe(
    host: Host, endpoint: str, *, python: str = "python3", timeout_s: float = 2.0
) -> HealthAnswer:
    """GET endpoint + /health, then /v1/models, within `timeout_s` in all; the first 200
    wins. No answer in time is a state (`slow_after_s`), not an error."""
    try:
        result = await host.run(
            [python, "-c", _PROBE, endpoint, f"{timeout_s:g}", *HEALTH_PATHS],
            timeout_s=timeout_s + PROBE_STARTUP_S,
            check=False,
        )
    except HostTimeout:  # the probe itself did not finish: the host is as busy as the engine
        return HealthAnswer("-", 0, slow_after_s=timeout_s)
    if result.returncode != 0:
        raise CommandFailed(
            f"the health probe of {endpoint} on {host.target} failed: {stderr_tail(result.stderr)}",
            returncode=result.returncode,
            stderr=result.stderr,
        )
    words = result.stdout.decode(errors="replace").split()
    if len(words) >= 2 and words[-1] == "slow":
        return HealthAnswer(words[-2], 0, slow_after_s=timeout_s)
    if len(words) >= 2 and words[-1].isdigit():
        return HealthAnswer(words[-2], int(words[-1]))
    return HealthAnswer("-", 0)
