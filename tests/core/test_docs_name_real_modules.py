"""The README and docs/ name only files that exist, so a moved module cannot leave them stale.

Three kinds of reference are checked:
- `src/specpilot/...` paths, anywhere in the text;
- paths from the repository root (`tools/`, `tests/`, `gpu/`, `bench/`, `examples/`, `docs/`,
  `scripts/`), anywhere in the text;
- paths inside the package written without `src/specpilot/` (`plan/vllm/planner.py`,
  `engines/*/loglines.py`, `launch/`): only those that start with one of the package's
  subpackages and end in `.py` or `/`, so prose such as "status/down" is not taken for a path;
  and the first column of the README's design table (`spec.py`, `models/`, ...).
The READMEs under gpu/ and tests/data/ are held to the first two kinds (their own relative
paths, such as `models/qwen3-8b/config.json` in gpu/README.md, are not package paths).

A placeholder (`<engine>`, `NAME`) or a glob (`*`) must match at least one file.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src" / "specpilot"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FOLDER_READMES = sorted([*REPO.glob("gpu/**/README.md"), *REPO.glob("tests/data/**/README.md")])
ROOT_FOLDERS = ("tools", "tests", "gpu", "bench", "examples", "docs", "scripts")
SUBPACKAGES = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())

# A path starts after whitespace or an opening quote/bracket, never inside a URL or a longer path.
_START = r"(?<![\w./~$-])"
_PATH_CHARS = r"[\w.*<>/-]"
PACKAGE_PATH = re.compile(_START + r"src/specpilot/" + _PATH_CHARS + "*")
ROOT_PATH = re.compile(_START + r"(?:" + "|".join(ROOT_FOLDERS) + r")/" + _PATH_CHARS + "*")
BARE_MODULE = re.compile(
    _START + r"(?:" + "|".join(SUBPACKAGES) + r")/" + _PATH_CHARS + r"*(?:\.py|/)(?![\w.*<>-])"
)
PLACEHOLDER = re.compile(r"<[^<>/]+>|\b[A-Z][A-Z0-9_]{2,}\b")


def _exists(base: Path, reference: str) -> bool:
    reference = reference.rstrip(".,:;")
    if (base / reference).exists():
        return True
    pattern = PLACEHOLDER.sub("*", reference).rstrip("/")
    return "*" in pattern and any(base.glob(pattern))


def _design_table_modules(text: str) -> list[str]:
    """First-column entries of the README's `| package | what it owns |` table."""
    table = text[text.index("| package | what it owns |") :].split("\n\n", 1)[0]
    rows = [line.split("|")[1] for line in table.splitlines()[2:] if line.startswith("|")]
    return [name for row in rows for name in re.findall(r"`([^`]+)`", row)]


def _references(text: str, *, bare_modules: bool = True) -> list[tuple[Path, str]]:
    found = [(REPO, m.group(0)) for m in PACKAGE_PATH.finditer(text)]
    found += [(REPO, m.group(0)) for m in ROOT_PATH.finditer(text)]
    if bare_modules:
        # `bench/` is both a root folder (speed scripts) and a subpackage: written bare it is the
        # root's (checked above); the package's files are written src/specpilot/bench/...
        found += [
            (PACKAGE, m.group(0))
            for m in BARE_MODULE.finditer(text)
            if m.group(0).split("/", 1)[0] not in ROOT_FOLDERS
        ]
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_path_a_doc_names_exists(doc: Path) -> None:
    references = _references(doc.read_text())
    missing = sorted({ref for base, ref in references if not _exists(base, ref)})
    assert not missing, f"{doc.relative_to(REPO)} names files that do not exist: {missing}"


@pytest.mark.parametrize("readme", FOLDER_READMES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_path_a_folder_readme_names_exists(readme: Path) -> None:
    references = _references(readme.read_text(), bare_modules=False)
    missing = sorted({ref for base, ref in references if not _exists(base, ref)})
    assert not missing, f"{readme.relative_to(REPO)} names files that do not exist: {missing}"


def test_the_design_table_names_modules_that_exist() -> None:
    modules = _design_table_modules((REPO / "README.md").read_text())
    assert "spec.py" in modules and "engines/" in modules  # the table was found
    assert [name for name in modules if not _exists(PACKAGE, name)] == []


@pytest.mark.parametrize(
    ("text", "base", "reference"),
    [
        ("the reader (`engines/argv.py`)", PACKAGE, "engines/argv.py"),
        ("see src/specpilot/check/flagtable.py.", REPO, "src/specpilot/check/flagtable.py."),
        ("run `python bench/NAME.py`", REPO, "bench/NAME.py"),
        ("in `engines/<engine>/rules.py`", PACKAGE, "engines/<engine>/rules.py"),
    ],
)
def test_the_scanner_finds_the_paths_it_must_check(text: str, base: Path, reference: str) -> None:
    assert (base, reference) in _references(text)


def test_a_stale_path_is_reported_and_prose_and_urls_are_not_paths() -> None:
    assert not _exists(PACKAGE, "check/flagtable.py")
    assert not _exists(PACKAGE, "launch/signatures/")
    assert _exists(PACKAGE, "engines/<engine>/signatures.py")
    assert _exists(REPO, "bench/NAME.py")
    prose = "run state, status/down; https://github.com/o/r/blob/abc/tests/x.py; ~/.cache/gpu/x"
    assert _references(prose) == []
