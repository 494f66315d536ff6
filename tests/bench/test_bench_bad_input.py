"""Bad input to `specpilot bench`: one line naming the field and the fix, exit 2, and no
server started (each case is refused before the first variant's `up`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.bench.conftest import SpecFactory, live_runs, specpilot, write_prompts

PROFILES = {"0": {"step_s": 0.02, "accept": 1.0, "cap": 4}}


def _refused(*argv: str | Path) -> str:
    ran = specpilot("bench", *argv, timeout_s=60)
    assert ran.code == 2, ran.output
    lines = [line for line in ran.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), ran.stderr
    assert not live_runs(Path(os.environ["SPECPILOT_HOME"]))  # nothing was started
    return lines[0]


@pytest.fixture
def spec(bench_spec: SpecFactory) -> Path:
    return bench_spec(PROFILES)


@pytest.fixture
def prompts(tmp_path: Path) -> Path:
    return write_prompts(tmp_path / "prompts.jsonl", 10)


def test_a_sample_larger_than_the_file(spec: Path, prompts: Path, tmp_path: Path) -> None:
    line = _refused(spec, "--prompts", prompts, "--job", tmp_path / "job", "--sample", 11)
    assert "--sample: asks for 11 rows but" in line and "10 usable rows" in line
    assert "pass --sample 10 or less" in line


def test_an_unreadable_prompts_file(spec: Path, tmp_path: Path) -> None:
    line = _refused(spec, "--prompts", tmp_path / "missing.jsonl", "--job", tmp_path / "job")
    assert line.startswith("error: --prompts: ") and "does not exist" in line
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"prompt": "fine"}\n{not json\n')
    line = _refused(spec, "--prompts", broken, "--job", tmp_path / "job")
    assert f"{broken}:2: line 2 is not valid JSON" in line and "fix or delete that line" in line


def test_an_unknown_method_in_variants(spec: Path, prompts: Path, tmp_path: Path) -> None:
    line = _refused(spec, "--prompts", prompts, "--job", tmp_path / "job", "--variants", "plain,MEDUSA:2")
    assert "--variants: 'MEDUSA' is not a speculative method of sglang" in line and "NEXTN" in line
    line = _refused(spec, "--prompts", prompts, "--job", tmp_path / "job", "--variants", "NEXTN:zero")
    assert "--variants: 'NEXTN:zero' gives no draft-token count" in line


def test_a_budget_too_small_for_the_warm_up(spec: Path, prompts: Path, tmp_path: Path) -> None:
    line = _refused(spec, "--prompts", prompts, "--job", tmp_path / "job", "--budget-s", 20, "--warmup-s", 30)
    assert (
        "--budget-s: 20 s leaves nothing after the 30 s warm-up" in line and "--budget-s well above" in line
    )


def test_an_unreachable_host(bench_spec: SpecFactory, prompts: Path, tmp_path: Path) -> None:
    spec = bench_spec(PROFILES, host="ssh://nobody@127.0.0.1:1")
    line = _refused(spec, "--prompts", prompts, "--job", tmp_path / "job", "--sample", 4)
    assert line.startswith("error: [host] target: ") and "127.0.0.1:1" in line


def test_write_never_replaces_a_file(spec: Path, prompts: Path, tmp_path: Path) -> None:
    existing = tmp_path / "best.toml"
    existing.write_text("keep me\n")
    line = _refused(spec, "--prompts", prompts, "--job", tmp_path / "job", "--write", existing)
    assert f"--write: {existing} exists" in line
    assert existing.read_text() == "keep me\n"


def test_a_request_field_given_twice(spec: Path, prompts: Path, tmp_path: Path) -> None:
    """generate's sampling options, read by the same code: a field both in --extra-body and
    its own flag is refused."""
    line = _refused(
        spec,
        "--prompts",
        prompts,
        "--job",
        tmp_path / "job",
        "--extra-body",
        '{"min_p": 0.1}',
        "--min-p",
        0.05,
    )
    assert (
        line.startswith("error: --extra-body: sets min_p, which --min-p also sets") and "give it once" in line
    )


def test_a_budget_too_small_for_one_point_starts_nothing_and_says_so(
    spec: Path, prompts: Path, tmp_path: Path
) -> None:
    """Above the warm-up, but each screen's share of it (half, split among the configurations)
    is below it: every point says why in the table, exit 2, nothing started."""
    job = tmp_path / "job"
    ran = specpilot(
        "bench", spec, "--prompts", prompts, "--job", job, "--sample", 8, "--budget-s", 20, "--warmup-s", 8,
        timeout_s=120,
    )  # fmt: skip
    assert ran.code == 2, ran.output
    assert ran.stderr.splitlines()[-1].startswith("error: --budget-s: no point could be started"), ran.stderr
    assert "not started" in ran.stdout and "axis layout: one GPU (one engine" in ran.stdout
    rows = json.loads((job / "bench.json").read_text())["variants"]
    assert rows and {row["search"] for row in rows} == {"not started"}
    screens = [
        row for row in rows if row["label"].split("@")[1] == str(max(r["max_running_requests"] for r in rows))
    ]
    assert screens and all(row["reason"].startswith("the budget leaves") for row in screens)
    assert not live_runs(Path(os.environ["SPECPILOT_HOME"]))
