"""A request failure's cause as a short, bounded label ("http_429", "timeout", ...).

Labels become Prometheus label values and page rows, so they must come from a small set:
the error text (as the client words it, and as the ledger keeps it in `last_error`) is
matched against a table of patterns; anything unmatched is "other".
"""

from __future__ import annotations

import re

#: (pattern over the error text, label); the first match wins; `{0}` takes group 1
CAUSE_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^HTTP (\d{3})\b"), "http_{0}"),
    (re.compile(r"timed out", re.IGNORECASE), "timeout"),
    (re.compile(r"^connection failed"), "connection"),
    (re.compile(r"^malformed response"), "malformed_response"),
)
#: rows sent again because their server went down (no attempt spent)
SERVER_DOWN = "server_down"
OTHER = "other"


def cause_of(error: str) -> str:
    """The label for one error text."""
    for pattern, label in CAUSE_PATTERNS:
        match = pattern.search(error)
        if match:
            return label.format(*match.groups())
    return OTHER
