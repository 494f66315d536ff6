"""Text the wire and the disk can carry: every str is UTF-8 except one holding a lone surrogate.

JSON may spell a lone surrogate (`"\\ud800"`) and Python decodes it, but no UTF-8
encoder writes it: such a prompt or answer is refused per row (`where_unencodable`)
before it reaches a request body, a part file or the ledger.
"""

from __future__ import annotations

from typing import Any


def may_hold_surrogates(raw: bytes) -> bool:
    """False when `raw` cannot decode to a lone surrogate: the fast path skips the walk.
    A raw JSON body must hold an escape or the lead byte of a UTF-8-encoded surrogate
    (json.loads decodes bytes with surrogatepass); two tests, not a loop: 902k rows call it."""
    return b"\\u" in raw or b"\xed" in raw


def where_unencodable(value: Any, path: str = "") -> str | None:
    """Where in `value` (a str, or strs inside lists and dicts) a lone surrogate is, or None."""
    if isinstance(value, str):
        return _where_in_str(value, path)
    if isinstance(value, dict):
        return _where_in_dict(value, path)
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = where_unencodable(item, f"{path}[{index}]")
            if found:
                return found
    return None


def _where_in_str(value: str, path: str) -> str | None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        return f"{shown(path) or 'the text'} (U+{ord(value[err.start]):04X} at character {err.start})"
    return None


def _where_in_dict(value: dict[Any, Any], path: str) -> str | None:
    """The first lone surrogate in a key or a value of `value`, each key before its value."""
    for key, item in value.items():
        inner = f"{path}.{key}" if path else str(key)
        found = where_unencodable(str(key), f"a key in {path or 'the row'}")
        found = found or where_unencodable(item, inner)
        if found:
            return found
    return None


def shown(text: str) -> str:
    """`text` safe to print and store: a lone surrogate written as its escape (`\\ud800`)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
