"""JSON as every `--json` prints it and every result file holds it: strict RFC 8259.

Python's `json` writes `NaN`, `Infinity` and `-Infinity`, which strict parsers (jq,
JavaScript's `JSON.parse`, Go, serde) refuse. A number that is not finite is written as
null instead, and the top-level object says why under `null_reasons` (path -> reason).
"""

from __future__ import annotations

import json
import math
from typing import Any

NULL_REASONS = "null_reasons"


def _finite(value: Any, path: str, reasons: dict[str, str]) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        reasons[path or "$"] = (
            f"{value!r} is not a JSON number ({'undefined' if value != value else 'unbounded'})"
        )
        return None
    if isinstance(value, dict):
        return {
            key: _finite(item, f"{path}.{key}" if path else str(key), reasons) for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_finite(item, f"{path}[{i}]", reasons) for i, item in enumerate(value)]
    return value


def dumps(data: Any, **options: Any) -> str:
    """`json.dumps` that never writes NaN or Infinity: null, with the reason in `null_reasons`."""
    reasons: dict[str, str] = {}
    clean = _finite(data, "", reasons)
    if reasons and isinstance(clean, dict):
        clean[NULL_REASONS] = {**clean.get(NULL_REASONS, {}), **reasons}
    return json.dumps(clean, allow_nan=False, **options)
