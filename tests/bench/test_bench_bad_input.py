"""Bad input to `specpilot bench`: one line naming the field and the fix, exit 2, and no
server started (each case is refused before the first variant's `up`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.bench.conftest import SPECULATIVE_ARGS, SpecFactory, live_runs, specpilot, write_prompts

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


def test_a_budget_under_the_two_configuration_minimum(spec: Path, tmp_path: Path) -> None:
    """Above the warm-up, but below two configurations' starts, warm-ups and screens as the
    budget line counts them (no start recorded here: the engine's stated estimate, at most the
    spec's ready timeout): refused before anything starts, naming the budget that can."""
    prompts = write_prompts(tmp_path / "prompts.jsonl", 60)
    job = tmp_path / "job"
    ran = specpilot(
        "bench", spec, "--prompts", prompts, "--job", job, "--sample", 8, "--budget-s", 20, "--warmup-s", 8,
        "--max-tokens", 16, timeout_s=120,
    )  # fmt: skip
    assert ran.code == 2, ran.output
    line = ran.stderr.splitlines()[-1]
    assert line.startswith("error: --budget-s: 20 s cannot measure two configurations: they need about ")
    least = int(line.split("they need about ")[1].split(" s")[0])
    assert least > 20 and f"pass --budget-s {least}" in line
    assert "budget: 20 s given; about " in ran.stderr and "compiles kernels" in ran.stderr
    assert not (job / "bench.json").exists()
    assert not live_runs(Path(os.environ["SPECPILOT_HOME"]))


def test_a_prompts_file_too_small_to_reach_steady_state(spec: Path, prompts: Path, tmp_path: Path) -> None:
    """10 rows cannot fill any configuration's largest cap once: no steady state to measure."""
    ran = specpilot(
        "bench", spec, "--prompts", prompts, "--job", tmp_path / "job", "--sample", 4, timeout_s=60
    )
    assert ran.code == 2, ran.output
    line = ran.stderr.splitlines()[-1]
    assert line.startswith("error: --prompts: 10 rows (all 10 usable rows of the prompts file) cannot fill ")
    assert "no steady state" in line and "bench on a prompts file of at least" in line
    assert not live_runs(Path(os.environ["SPECPILOT_HOME"]))


@pytest.mark.parametrize("json_out", [False, True], ids=["human", "json"])
def test_a_bad_prompts_or_job_path_says_its_fix_once(
    json_out: bool, spec: Path, prompts: Path, tmp_path: Path
) -> None:
    """The --prompts and --job refusals carried their fix in the message too: the line said it twice."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cases = [
        (["--prompts", tmp_path / "missing.jsonl", "--job", tmp_path / "job"], "--prompts", "pass a .jsonl"),
        (["--prompts", prompts, "--job", blocker / "job"], "--job", "choose a directory you can write to"),
    ]
    for argv, field, fix in cases:
        ran = specpilot("bench", spec, *argv, *(["--json"] if json_out else []), timeout_s=60)
        assert ran.code == 2, ran.output
        if json_out:
            said = json.loads(ran.stdout)
            assert said["error"].startswith(f"{field}: ") and fix not in said["error"], said
            assert said["fix"].startswith(fix), said
        else:
            (line,) = [line for line in ran.stderr.splitlines() if line.strip()]
            assert line.startswith(f"error: {field}: ") and line.count(fix) == 1, line


@pytest.mark.parametrize("variants", [[], ["--variants", "plain"]], ids=["default", "plain-alone"])
@pytest.mark.parametrize("json_out", [False, True], ids=["human", "json"])
def test_a_mistyped_secret_flag_keeps_its_value_out_of_bench(
    json_out: bool, variants: list[str], bench_spec: SpecFactory, tmp_path: Path
) -> None:
    """`--api-ky KEY` / `--hf-tokn TOKEN`: check refuses every configuration, and its fix moves the
    value onto --api-key / --hf-token; bench wrote it in each row's argv (bench.json, --json).
    Nothing bench prints or writes holds either value; the refusal names the fix, masked."""
    secrets = ["sk-SECRET123", "hf_tokenvalue9"]
    args = [*SPECULATIVE_ARGS, "--api-ky", secrets[0], "--hf-tokn", secrets[1]]
    spec = bench_spec(PROFILES, args=args)
    prompts = write_prompts(tmp_path / "prompts.jsonl", 60)
    job = tmp_path / "job"
    ran = specpilot(
        "bench", spec, "--prompts", prompts, "--job", job, "--sample", 8, "--max-tokens", 16,
        "--budget-s", 60, "--warmup-s", 1, *variants, *(["--json"] if json_out else []), timeout_s=120,
    )  # fmt: skip
    assert ran.code == 2, ran.output
    assert not live_runs(Path(os.environ["SPECPILOT_HOME"]))
    written = [path for path in tmp_path.rglob("*") if path.is_file() and path.suffix != ".toml"]
    for secret in secrets:
        assert secret not in ran.output
        assert not [path for path in written if secret in path.read_text(errors="replace")]
    refusal = json.loads(ran.stdout)["error"] if json_out else ran.stderr.splitlines()[-1]
    assert "flag-unknown" in refusal and "--api-key *** in place of --api-ky" in refusal, refusal


@pytest.mark.parametrize("variants", ["DFLASH:1", "DFLASH:1,DFLASH:2"], ids=["one", "two"])
def test_configurations_check_refuses_every_one_of_are_refused_before_a_start(
    variants: str, spec: Path, tmp_path: Path
) -> None:
    """Every configuration refused by check (DFLASH without its drafter on SGLang 0.5.13): one
    started nothing and ended 'raise --budget-s'; two said 'only no configuration can run'. Now
    one line, before the budget, names each configuration with check's rule and fix."""
    prompts = write_prompts(tmp_path / "prompts.jsonl", 60)
    job = tmp_path / "job"
    ran = specpilot(
        "bench", spec, "--prompts", prompts, "--job", job, "--sample", 8, "--max-tokens", 16,
        "--budget-s", 60, "--warmup-s", 1, "--variants", variants, timeout_s=120,
    )  # fmt: skip
    assert ran.code == 2, ran.output
    line = ran.stderr.splitlines()[-1]
    assert line.startswith("error: --variants: check or plan refuses every configuration"), line
    for label in ("DFLASH-1", "DFLASH-2") if "," in variants else ("DFLASH-1",):
        assert label in line
    assert "sglang-dflash-needs-draft" in line and "fix: --speculative-draft-model-path" in line
    assert "--budget-s" not in line and "budget:" not in ran.stderr
    assert not (job / "bench.json").exists()
    assert not live_runs(Path(os.environ["SPECPILOT_HOME"]))
