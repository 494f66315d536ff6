"""specpilot check agrees with SGLang's own validator on generated flag combinations.

Each release runs in its own cached environment (tests/conformance/venvs.py) with CPU torch;
`sglang_harness.py` calls the release's `prepare_server_args` (and 0.5.23's `resolve_once`) on
every combination in one process. SGLang's validation asks the GPU questions; the harness
answers them as a 96 GB, SM 12.0, `is_cuda() == True` GPU with flashinfer installed (it
replaces SGLang's platform helpers / installs the platform override of 0.5.19+), and specpilot is
given the same facts. Asserted per combination: same accept/reject, and on accept the same
effective values of every arg specpilot's rules adjust.
"""

from __future__ import annotations

import itertools
import json
import random
import subprocess
from pathlib import Path

import pytest
from packaging.version import Version

from specpilot.check import check_args
from specpilot.check.fix import fix_launch
from specpilot.engines.registry import table_for
from specpilot.engines.sglang.releases import STRATEGY_RENAME

from . import venvs

pytestmark = pytest.mark.conformance

HERE = Path(__file__).parent
MODELS = {"hybrid": HERE / "models" / "hybrid", "dense": HERE / "models" / "dense"}
VERSIONS = venvs.SGLANG_RELEASES
CASES_PER_MODEL = 130
#: how argparse splits argv (specpilot's one argv reader must split it the same way):
#: `=` forms, unique prefixes, underscores (refused: plain argparse), a flag missing its value
SPELLINGS: tuple[tuple[str, ...], ...] = (
    ("--page-size=16", "--max-running-requests=8"),
    ("--tp", "1", "--mem-frac", "0.8"),
    ("--mem_fraction_static", "0.8"),
    ("--port", "--host", "127.0.0.1"),
    ("--max-running-req", "8", "--disable-radix"),
)
COMPARED = (
    "speculative_algorithm",
    "max_running_requests",
    "page_size",
    "disable_overlap_schedule",
    "enable_mixed_chunk",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
)

ALGOS = (None, "NEXTN", "EAGLE", "EAGLE3", "STANDALONE", "NGRAM", "DFLASH", "nextn", "MTP")
SPEC_PARAMS = ((), (3, 1, 4), (3, 1, 6), (3, 4, 8), ("topk", 4), ("steps", 2))
BACKENDS = (None, "triton", "flashinfer", "fa3")
ENVS = ({}, {"SGLANG_ENABLE_SPEC_V2": "1"}, {"SGLANG_ENABLE_SPEC_V2": "0"})


def _architecture(model: str) -> str:
    config = json.loads((MODELS[model] / "config.json").read_text())
    return str(config["architectures"][0])


def _era_a(version: str) -> bool:
    """Until 0.5.14: --mamba-scheduler-strategy and SGLANG_ENABLE_SPEC_V2."""
    return Version(version) < Version(STRATEGY_RENAME.release)


def _strategy_flag(version: str) -> str:
    return STRATEGY_RENAME.flag_at(version)


def _case(version: str, model: str, choice: tuple[object, ...], with_draft: bool) -> dict[str, object]:
    algo, strategy, radix_off, overlap_off, page, params, mrr, mixed, backend, env = choice
    argv = ["--model-path", str(MODELS[model]), "--device", "cuda"]
    if algo:
        argv += ["--speculative-algorithm", str(algo)]
        if with_draft:
            argv += ["--speculative-draft-model-path", str(MODELS["dense"])]
        if params == ("topk", 4):
            argv += ["--speculative-eagle-topk", "4"]
        elif params == ("steps", 2):
            argv += ["--speculative-num-steps", "2", "--speculative-eagle-topk", "1"]
        elif params:
            steps, topk, draft = params  # type: ignore[misc]
            argv += [
                "--speculative-num-steps",
                str(steps),
                "--speculative-eagle-topk",
                str(topk),
                "--speculative-num-draft-tokens",
                str(draft),
            ]
    if strategy:
        argv += [_strategy_flag(version), str(strategy)]
    if radix_off:
        argv.append("--disable-radix-cache")
    if overlap_off:
        argv.append("--disable-overlap-schedule")
    if page:
        argv += ["--page-size", str(page)]
    if mrr:
        argv += ["--max-running-requests", str(mrr)]
    if mixed:
        argv.append("--enable-mixed-chunk")
    if backend:
        argv += ["--attention-backend", str(backend)]
    return {"model": model, "argv": argv, "env": env if _era_a(version) else {}}


def _strategies(version: str) -> tuple[str | None, ...]:
    """Every value the release's strategy flag accepts (from its flag table), and unset."""
    dest = "mamba_scheduler_strategy" if _era_a(version) else "mamba_radix_cache_strategy"
    flag = table_for("sglang", Version(version)).by_dest[dest]
    return (None, *(flag.choices or ()))


def _every_mamba_combination(version: str, rng: random.Random) -> list[tuple[object, ...]]:
    """Every strategy x speculative algorithm x radix on/off x overlap on/off x draft-token
    count given or not, the other dimensions drawn: a rule that hinges on one of these
    (0.5.13.post1's extra_buffer_lazy + --speculative-num-draft-tokens) cannot hide."""
    explicit = [p for p in SPEC_PARAMS if len(p) == 3]
    implicit = [p for p in SPEC_PARAMS if len(p) != 3]
    choices = []
    for algo, strategy, radix_off, overlap_off, draft_given in itertools.product(
        ALGOS, _strategies(version), (False, True), (False, True), (False, True)
    ):
        params = rng.choice(explicit if draft_given else implicit)
        page, mrr, mixed = rng.choice((None, 1, 64)), rng.choice((None, 64)), rng.random() < 0.5
        choices.append(
            (
                algo,
                strategy,
                radix_off,
                overlap_off,
                page,
                params,
                mrr,
                mixed,
                rng.choice(BACKENDS),
                rng.choice(ENVS),
            )
        )
    return choices


def generate_cases(version: str) -> list[dict[str, object]]:
    """Every mamba combination and a seeded sample of the whole space, per model, plus the
    incident's command."""
    space = list(
        itertools.product(
            ALGOS,
            _strategies(version),
            (False, True),
            (False, True),
            (None, 1, 64),
            SPEC_PARAMS,
            (None, 64),
            (False, True),
            BACKENDS,
            ENVS,
        )
    )
    rng = random.Random(f"specpilot-{version}")
    cases = []
    for model in MODELS:
        for choice in _every_mamba_combination(version, rng) + rng.sample(space, CASES_PER_MODEL):
            cases.append(_case(version, model, choice, with_draft=rng.random() < 0.8))
    incident = ("NEXTN", "no_buffer", False, False, None, (3, 1, 4), None, False, None, {})
    cases.append(_case(version, "hybrid", incident, with_draft=False))
    for extra in SPELLINGS:
        argv = ["--model-path", str(MODELS["dense"]), "--device", "cuda", *extra]
        cases.append({"model": "dense", "argv": argv, "env": {}})
    return cases


def test_every_mamba_combination_is_drawn_for_every_release() -> None:
    """The generator itself (no engine needed): 0.5.13.post1's lazy + spec gap is in it."""
    for version in VERSIONS:
        strategies = _strategies(version)
        drawn = {
            (c[0], c[1], c[2], c[3], len(c[5]) == 3)  # type: ignore[arg-type]
            for c in _every_mamba_combination(version, random.Random(0))
        }
        assert len(drawn) == len(ALGOS) * len(strategies) * 2 * 2 * 2
    lazy_spec = [
        case["argv"]
        for case in generate_cases("0.5.13.post1")
        if "extra_buffer_lazy" in case["argv"] and "--speculative-num-draft-tokens" in case["argv"]  # type: ignore[operator]
    ]
    assert lazy_spec


def run_engine(version: str, cases: list[dict[str, object]]) -> list[dict[str, object]]:
    fields = [*COMPARED, "mamba_scheduler_strategy", "mamba_radix_cache_strategy"]
    request = json.dumps({"fields": fields, "cases": cases})
    done = subprocess.run(
        [str(venvs.base_python()), str(HERE / "sglang_harness.py")],
        input=request,
        capture_output=True,
        text=True,
        check=False,
        timeout=1500,
        env={"PYTHONPATH": venvs.sglang_pythonpath(version), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, f"harness failed for sglang {version}:\n{done.stderr[-3000:]}"
    results: list[dict[str, object]] = json.loads(done.stdout)
    return results


def _disagreements(version: str) -> tuple[int, list[str]]:
    cases = generate_cases(version)
    results = run_engine(version, cases)
    strategy_dest = "mamba_scheduler_strategy" if _era_a(version) else "mamba_radix_cache_strategy"
    problems = []
    for case, engine in zip(cases, results, strict=True):
        mine = check_args("sglang", version, case["argv"], case["env"], _architecture(str(case["model"])))  # type: ignore[arg-type]
        label = f"{case['model']} {' '.join(case['argv'][4:])} env={case['env']}"  # type: ignore[index]
        if mine.ok != engine["ok"]:
            errors = [f.message for f in mine.findings if f.severity == "error"]
            problems.append(
                f"{label}: engine ok={engine['ok']} ({engine['error']}), specpilot ok={mine.ok} {errors}"
            )
            continue
        if not mine.ok:
            continue
        values = engine["values"]
        assert isinstance(values, dict)
        for dest in (*COMPARED, strategy_dest):
            if mine.effective_values.get(dest) != values.get(dest):
                problems.append(
                    f"{label}: {dest} engine={values.get(dest)!r} specpilot={mine.effective_values.get(dest)!r}"
                )
    return len(cases), problems


@pytest.mark.parametrize("version", VERSIONS)
def test_specpilot_agrees_with_sglang_validator(version: str) -> None:
    count, problems = _disagreements(version)
    assert count >= 200
    assert not problems, f"{len(problems)} of {count} combinations disagree:\n" + "\n".join(problems[:40])


#: flags of 0.5.17-0.5.19 commands that 0.5.23 no longer parses, as a user would paste them
OLD_COMMANDS: tuple[tuple[str, ...], ...] = (
    ("--cuda-graph-max-bs", "128"),
    ("--cuda-graph-bs", "1", "2", "4", "8"),
    ("--mamba-scheduler-strategy", "extra_buffer"),
    ("--disable-piecewise-cuda-graph",),
    ("--enable-breakable-cuda-graph",),
    (
        "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", str(MODELS["dense"]),
        "--speculative-dflash-draft-window-size", "8",
    ),
    ("--cuda-graph-max-bs", "64", "--mamba-scheduler-strategy", "no_buffer", "--disable-overlap-schedule"),
)  # fmt: skip


def test_check_fix_turns_older_commands_into_ones_0_5_23_accepts() -> None:
    """Each command is refused by the real 0.5.23 argparse with the error check quotes (ambiguous
    prefix or unrecognized), and the command `check --fix` prints is accepted by the real
    0.5.23 ServerArgs."""
    version = "0.5.23"
    base = ["--model-path", str(MODELS["hybrid"]), "--device", "cuda"]
    arch = _architecture("hybrid")
    fixed = [
        fix_launch(
            lambda a, e: check_args("sglang", version, a, e, arch),
            "sglang",
            Version(version),
            base + list(flags),
            {},
        )
        for flags in OLD_COMMANDS
    ]
    cases = [{"model": "hybrid", "argv": base + list(f), "env": {}} for f in OLD_COMMANDS]
    cases += [{"model": "hybrid", "argv": f.args, "env": f.env} for f in fixed]
    results = run_engine(version, cases)
    before, after = results[: len(OLD_COMMANDS)], results[len(OLD_COMMANDS) :]
    for flags, engine, fix in zip(OLD_COMMANDS, before, fixed, strict=True):
        assert not engine["ok"], flags
        mine = check_args("sglang", version, base + list(flags), {}, arch)
        quoted = [
            f.message.split("exits with '")[1].rstrip("')") for f in mine.findings if f.rule == "flag-removed"
        ]
        said = str(engine["error"]).split("error: ", 1)[-1]
        assert any(said.startswith(q) for q in quoted), (said, quoted)
        assert fix.result.ok, (flags, fix.result.findings)
    for fix, engine in zip(fixed, after, strict=True):
        assert engine["ok"], (fix.args, engine["error"])


#: the algorithms added after the generator's (DSPARK 0.5.19, UNO 0.5.20), with what each refuses
NEW_ALGORITHM_FLAGS: tuple[tuple[str, ...], ...] = (
    ("--speculative-algorithm", "DSPARK"),
    ("--speculative-algorithm", "DSPARK", "--speculative-draft-model-path", str(MODELS["dense"])),
    ("--speculative-algorithm", "dspark", "--speculative-draft-model-path", str(MODELS["dense"]),
     "--speculative-dspark-block-size", "3"),
    ("--speculative-algorithm", "DSPARK", "--speculative-draft-model-path", str(MODELS["dense"]),
     "--speculative-dspark-block-size", "3", "--speculative-num-draft-tokens", "5"),
    ("--speculative-algorithm", "DSPARK", "--speculative-draft-model-path", str(MODELS["dense"]),
     "--speculative-num-draft-tokens", "5", "--speculative-num-steps", "3", "--speculative-eagle-topk", "2"),
    ("--speculative-algorithm", "DSPARK", "--speculative-draft-model-path", str(MODELS["dense"]),
     "--speculative-num-draft-tokens", "1"),
    ("--speculative-algorithm", "DSPARK", "--speculative-draft-model-path", str(MODELS["dense"]),
     "--max-running-requests", "8"),
    ("--speculative-algorithm", "UNO"),
    ("--speculative-algorithm", "UNO", "--uno-lora-path", "/adapters/uno"),
    ("--speculative-algorithm", "UNO", "--uno-lora-path", "/adapters/uno", "--speculative-num-draft-tokens", "4"),
    ("--speculative-algorithm", "UNO", "--uno-lora-path", "/adapters/uno", "--speculative-num-draft-tokens", "4",
     "--attention-backend", "fa3"),
    ("--speculative-algorithm", "UNO", "--uno-lora-path", "/adapters/uno", "--speculative-num-draft-tokens", "4",
     "--attention-backend", "fa3", "--speculative-draft-model-path", str(MODELS["dense"])),
    ("--speculative-algorithm", "UNO", "--uno-lora-path", "/adapters/uno", "--speculative-num-draft-tokens", "4",
     "--attention-backend", "fa3", "--tp-size", "2"),
)  # fmt: skip


@pytest.mark.parametrize("version", [v for v in VERSIONS if Version(v) >= Version("0.5.19")])
def test_the_new_speculative_algorithms_agree_with_the_validator(version: str) -> None:
    """DSPARK (`_handle_dspark`) and UNO (`_handle_uno`): accept/refuse and the values they settle."""
    base = ["--model-path", str(MODELS["dense"]), "--device", "cuda"]
    cases = [{"model": "dense", "argv": base + list(flags), "env": {}} for flags in NEW_ALGORITHM_FLAGS]
    problems = []
    for case, engine in zip(cases, run_engine(version, cases), strict=True):
        mine = check_args("sglang", version, case["argv"], {}, _architecture("dense"))  # type: ignore[arg-type]
        label = " ".join(case["argv"][4:])  # type: ignore[index]
        if mine.ok != engine["ok"]:
            errors = [f.message for f in mine.findings if f.severity == "error"]
            problems.append(f"{label}: engine ok={engine['ok']} ({engine['error']}), specpilot {errors}")
        elif mine.ok:
            values = engine["values"]
            assert isinstance(values, dict)
            problems += [
                f"{label}: {dest} engine={values.get(dest)!r} specpilot={mine.effective_values.get(dest)!r}"
                for dest in COMPARED
                if mine.effective_values.get(dest) != values.get(dest)
            ]
    assert not problems, "\n".join(problems)


#: adaptive speculation (`_maybe_disable_adaptive`, `_init_adaptive_speculative_params`): on for
#: EAGLE/NEXTN at topk 1, its steps among the release's candidates; off (a warning) otherwise
ADAPTIVE_FLAGS: tuple[tuple[str, ...], ...] = (
    ("--speculative-algorithm", "NEXTN", "--speculative-adaptive"),
    ("--speculative-algorithm", "NEXTN", "--speculative-adaptive", "--speculative-num-steps", "5",
     "--speculative-eagle-topk", "1"),
    ("--speculative-algorithm", "NEXTN", "--speculative-adaptive", "--speculative-num-steps", "7",
     "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3"),
    ("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(MODELS["dense"]),
     "--speculative-adaptive", "--speculative-num-steps", "3", "--speculative-eagle-topk", "2",
     "--speculative-num-draft-tokens", "8"),
    ("--speculative-algorithm", "DSPARK", "--speculative-draft-model-path", str(MODELS["dense"]),
     "--speculative-adaptive"),
)  # fmt: skip


@pytest.mark.parametrize("version", [v for v in VERSIONS if Version(v) >= Version("0.5.19")])
def test_adaptive_speculation_agrees_with_the_validator(version: str) -> None:
    """0.5.19 refuses five adaptive steps and 0.5.23 takes them; topk 2 and DSPARK turn it off."""
    base = ["--model-path", str(MODELS["dense"]), "--device", "cuda"]
    cases = [{"model": "dense", "argv": base + list(flags), "env": {}} for flags in ADAPTIVE_FLAGS]
    problems = []
    for case, engine in zip(cases, run_engine(version, cases), strict=True):
        mine = check_args("sglang", version, case["argv"], {}, _architecture("dense"))  # type: ignore[arg-type]
        label = " ".join(case["argv"][4:])  # type: ignore[index]
        if mine.ok != engine["ok"]:
            errors = [f.message for f in mine.findings if f.severity == "error"]
            problems.append(f"{label}: engine ok={engine['ok']} ({engine['error']}), specpilot {errors}")
        elif mine.ok:
            values = engine["values"]
            assert isinstance(values, dict)
            problems += [
                f"{label}: {dest} engine={values.get(dest)!r} specpilot={mine.effective_values.get(dest)!r}"
                for dest in COMPARED
                if mine.effective_values.get(dest) != values.get(dest)
            ]
    assert not problems, "\n".join(problems)
