"""The endpoint probe, run on the host itself so it works the same for SSH targets
(the server listens on the host's loopback, which this machine cannot reach)."""

from __future__ import annotations

from dataclasses import dataclass

from specpilot.hosts.base import Host
from specpilot.hosts.errors import CommandFailed, stderr_tail

HEALTH_PATHS = ("/health", "/v1/models")

# Tries each path in order; prints "PATH STATUS" for the first answer that is 200,
# else the last answer (status 0 when nothing answered: refused, reset, timed out, or not
# HTTP). Anything else is a bug: its traceback and exit status reach `probe`.
_PROBE = """\
import http.client, sys, urllib.error, urllib.request
base, paths = sys.argv[1], sys.argv[2:]
last = "- 0"
for path in paths:
    try:
        with urllib.request.urlopen(base + path, timeout=2) as r:
            print(path, r.status); sys.exit(0)
    except urllib.error.HTTPError as e:
        last = f"{path} {e.code}"
    except (OSError, http.client.HTTPException):
        last = f"{path} 0"
print(last)
"""


@dataclass(frozen=True)
class HealthAnswer:
    path: str
    status: int  # HTTP status, 0 when nothing answered

    @property
    def ok(self) -> bool:
        return self.status == 200


async def probe(
    host: Host, endpoint: str, *, python: str = "python3", timeout_s: float = 2.0
) -> HealthAnswer:
    """GET endpoint + /health, then /v1/models; the first 200 wins."""
    result = await host.run(
        [python, "-c", _PROBE, endpoint, *HEALTH_PATHS],
        timeout_s=timeout_s + 5.0,
        check=False,
    )
    if result.returncode != 0:
        raise CommandFailed(
            f"the health probe of {endpoint} on {host.target} failed: {stderr_tail(result.stderr)}",
            returncode=result.returncode,
            stderr=result.stderr,
        )
    words = result.stdout.decode(errors="replace").split()
    if len(words) >= 2 and words[-1].isdigit():
        return HealthAnswer(words[-2], int(words[-1]))
    return HealthAnswer("-", 0)
