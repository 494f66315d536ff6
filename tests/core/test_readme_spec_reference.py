"""The README's spec reference names every key the spec accepts, so it cannot drift."""

from __future__ import annotations

import re
from pathlib import Path

from specpilot.spec import _SECTIONS, Spec

README = Path(__file__).parents[2] / "README.md"


def test_every_spec_key_is_documented() -> None:
    text = README.read_text()
    reference = text[text.index("## Spec reference") :]
    block = reference[reference.index("```toml") : reference.index("```", reference.index("```toml") + 7)]
    documented: dict[str, set[str]] = {}
    section = ""
    for line in block.splitlines():
        if match := re.match(r"^\[(\w+)\]", line):
            section = match.group(1)
        elif match := re.match(r"^(\w+) = ", line):
            documented.setdefault(section, set()).add(match.group(1))
    assert documented[""] == {
        name for name in Spec.model_fields if name not in _SECTIONS and name != "source_path"
    }
    for name, model in _SECTIONS.items():
        assert documented[name] == set(model.model_fields), name
