"""Every file under tests/data says where it came from: a public URL, or recorded by specpilot on named hardware and date.

A file's statement is its own (a JSON `source` value, or the leading `#` lines of a log or
TOML), a same-named sibling's (`x.log` is described by `x.json`), or its folder's README
(the text before the first `## ` heading). Evidence that can't be re-obtained is a defect.
"""

from __future__ import annotations

import json
import re
from itertools import takewhile
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"

PUBLIC_URL = re.compile(r"https://(?!(?:localhost|127\.0\.0\.1))[\w.-]+\.\w+/\S+")
RECORDED = re.compile(
    r"recorded by specpilot on (?P<hardware>.+?), (?P<date>\d{4}-\d{2}-\d{2})", re.IGNORECASE
)


def own_statement(path: Path) -> str:
    """What the file says about itself, or ''."""
    text = path.read_text(errors="replace")
    if path.suffix == ".json":
        raw = json.loads(text)
        return str(raw.get("source", "")) if isinstance(raw, dict) else ""
    if path.name == "README.md":
        return text.split("\n## ", 1)[0]
    return "\n".join(takewhile(lambda line: line.startswith("#"), text.splitlines()))


def cites(statement: str) -> bool:
    return bool(PUBLIC_URL.search(statement) or RECORDED.search(statement))


def uncited(root: Path) -> list[str]:
    """Data files (relative to `root`) with no citing statement of their own, a sibling's or their folder's."""
    missing = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.name != "README.md"):
        siblings = sorted(p for p in path.parent.glob(f"{path.stem}.*") if p != path)
        readme = path.parent / "README.md"
        candidates = [path, *siblings, *([readme] if readme.exists() else [])]
        if not any(cites(own_statement(c)) for c in candidates):
            missing.append(str(path.relative_to(root)))
    return missing


def test_every_data_file_cites_its_source() -> None:
    assert list(DATA.rglob("*.log")), "no test data found: the path above is wrong"
    assert uncited(DATA) == []


def test_a_file_without_a_statement_is_reported(tmp_path: Path) -> None:
    (tmp_path / "bare.log").write_text("KV Cache is allocated. #tokens: 1000\n")
    (tmp_path / "described.log").write_text("Load weight end.\n")
    (tmp_path / "described.json").write_text(json.dumps({"source": "https://github.com/o/r/issues/1"}))
    (tmp_path / "vague.json").write_text(json.dumps({"source": "a public GitHub README somewhere"}))
    (tmp_path / "header.log").write_text("# source: https://github.com/o/r/issues/2\nline\n")
    assert uncited(tmp_path) == ["bare.log", "vague.json"]


def test_a_folder_readme_covers_its_files_only_with_a_recorded_by_statement(tmp_path: Path) -> None:
    (tmp_path / "run.log").write_text("line\n")
    (tmp_path / "README.md").write_text(
        "# Runs\n\nCaptured on some machine.\n\n## Files\nhttps://example.com/x\n"
    )
    assert uncited(tmp_path) == ["run.log"]  # a URL after the first section does not count
    (tmp_path / "README.md").write_text("# Runs\n\nRecorded by specpilot on an NVIDIA H200, 2026-11-30.\n")
    assert uncited(tmp_path) == []
