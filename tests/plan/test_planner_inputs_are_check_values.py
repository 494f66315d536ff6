"""One model of the engine: the planner's inputs are `check`'s effective values.

The conformance suite's generated flag combinations (the ones run against SGLang's and
vLLM's own validators) go through both `check_args` and the planner's input stage;
every setting the planner sizes memory from must equal what the rules computed. This
compares specpilot with itself, so it needs no engine environment.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specpilot.check import GpuFacts, check_args
from specpilot.check.types import CheckResult
from specpilot.engines.human_int import human_int
from specpilot.models.shape import ModelShape, load_model_shape
from specpilot.plan import plan_inputs
from specpilot.plan.sglang.planner import planner_settings
from specpilot.plan.vllm.planner import resolve_inputs
from specpilot.spec import Spec

from ..conformance import test_sglang_conformance as sglang_cases
from ..conformance import test_vllm_conformance as vllm_cases
from ..conformance.venvs import SGLANG_RELEASES

GPU_GIB = 96.0  # the GPU the conformance harness describes to the engines
VLLM_RELEASES = ("0.26.0", "0.32.0")


def _spec(engine: str, version: str, model_dir: Path, argv: list[str], env: dict[str, str]) -> Spec:
    """A spec of the case: its model flag moves to [model] path, as a spec file has it."""
    return Spec.model_validate(
        {
            "name": "case",
            "model": {"path": str(model_dir)},
            "gpu": {"memory_gib": GPU_GIB},
            "engine": {"name": engine, "version": version, "args": argv, "env": env},
        }
    )


def _check(engine: str, version: str, argv: list[str], env: dict[str, str], shape: ModelShape) -> CheckResult:
    return check_args(
        engine,
        version,
        argv,
        env,
        shape.architecture,
        GpuFacts(memory_gib=GPU_GIB),
        shape.mtp_num_layers,
        shape.is_hybrid,
    )


@pytest.mark.parametrize("version", SGLANG_RELEASES)
def test_sglang_planner_inputs_equal_check_effective_values(version: str) -> None:
    problems: list[str] = []
    accepted = 0
    for case in sglang_cases.generate_cases(version):
        argv, env = list(case["argv"]), dict(case["env"])  # type: ignore[call-overload]
        model_dir = sglang_cases.MODELS[str(case["model"])]
        shape = load_model_shape(model_dir)
        checked = _check("sglang", version, argv, env, shape)
        if not checked.ok:  # plan refuses what check rejects (cli/plan.py refuse_rejected_flags)
            continue
        accepted += 1
        spec = _spec("sglang", version, model_dir, argv[2:], env)
        s = planner_settings(spec, shape, plan_inputs(spec)[1])
        v = checked.effective_values
        strategy = v.get("mamba_radix_cache_strategy") or v.get("mamba_scheduler_strategy")
        spec_on = v["speculative_algorithm"] is not None
        expected = {
            "speculative_algorithm": v["speculative_algorithm"],
            "num_draft_tokens": v["speculative_num_draft_tokens"] if spec_on else 0,
            "max_running_requests": v["max_running_requests"],
            "max_running_requests_given": "max_running_requests" in checked.given,
            "page_size": v["page_size"],
            "overlap_schedule": not v["disable_overlap_schedule"],
            "radix_cache_disabled": v["disable_radix_cache"],
            # a strategy the rules leave at auto (radix cache off, dense model) has no extra buffers
            "mamba_strategy": "no_buffer" if v["disable_radix_cache"] or strategy == "auto" else strategy,
            "tp_size": v.get("tp_size", v.get("tensor_parallel_size")),
            "mem_fraction_given": "mem_fraction_static" in checked.given,
            "chunked_prefill_size": v["chunked_prefill_size"],
            "cuda_graph_max_bs": v.get("cuda_graph_max_bs", v.get("cuda_graph_max_bs_decode")),
        }
        for name, value in expected.items():
            if getattr(s, name) != value:
                problems.append(
                    f"{' '.join(argv[4:])} env={env}: {name} plan={getattr(s, name)!r} check={value!r}"
                )
    assert accepted >= 100
    assert not problems, f"{len(problems)} disagreements:\n" + "\n".join(problems[:30])


def _vllm_cases() -> list[dict[str, object]]:
    """The conformance cases, plus each --max-num-seqs case in vLLM's underscore spelling."""
    cases = vllm_cases.generate_cases()
    underscored = [
        {**case, "argv": ["--max_num_seqs" if a == "--max-num-seqs" else a for a in case["argv"]]}  # type: ignore[attr-defined]
        for case in cases
        if "--max-num-seqs" in case["argv"]  # type: ignore[operator]
    ]
    return cases + underscored


@pytest.mark.parametrize("version", VLLM_RELEASES)
def test_vllm_planner_inputs_equal_check_effective_values(version: str) -> None:
    problems: list[str] = []
    accepted = 0
    for case in _vllm_cases():
        argv = list(case["argv"])  # type: ignore[call-overload]
        model_dir = vllm_cases.MODELS[str(case["model"])]
        shape = load_model_shape(model_dir)
        checked = _check("vllm", version, argv, {}, shape)
        if not checked.ok:
            continue
        accepted += 1
        spec = _spec("vllm", version, model_dir, argv[2:], {})
        inputs = resolve_inputs(spec, shape, plan_inputs(spec)[1])
        v = checked.effective_values
        raw = v["speculative_config"]
        tokens = int(json.loads(raw).get("num_speculative_tokens", 0)) if isinstance(raw, str) else 0
        expected: dict[str, object] = {
            "gpu_memory_utilization": v["gpu_memory_utilization"],
            "prefix_caching": v["enable_prefix_caching"],
            "num_speculative_tokens": tokens,
            "tp_size": v["tensor_parallel_size"],
            "max_model_len": int(str(v["max_model_len"])),
            "max_num_seqs": v["max_num_seqs"],
            "max_num_batched_tokens": human_int(str(v["max_num_batched_tokens"])),
        }
        for name, value in expected.items():
            if getattr(inputs, name) != value:
                problems.append(
                    f"{' '.join(argv[2:])}: {name} plan={getattr(inputs, name)!r} check={value!r}"
                )
    assert accepted >= 100
    assert not problems, f"{len(problems)} disagreements:\n" + "\n".join(problems[:30])


def test_vllm_underscore_spelling_reaches_the_planner() -> None:
    """vLLM's argparse takes --max_num_seqs; the planner sizes with it, as check reads it."""
    model_dir = vllm_cases.MODELS["dense"]
    spec = _spec("vllm", "0.26.0", model_dir, ["--max_num_seqs", "7"], {})
    shape = load_model_shape(model_dir)
    assert resolve_inputs(spec, shape, plan_inputs(spec)[1]).max_num_seqs == 7


@pytest.mark.parametrize(
    ("version", "argv", "name", "value"),
    [
        # DFLASH: steps and topk forced to 1, 16 draft tokens (the block size), not steps + 1
        (
            "0.5.14",
            ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "/d"],
            "num_draft_tokens",
            16,
        ),
        # NGRAM keeps the overlap scheduler from 0.5.14 on (only era A turned it off)
        ("0.5.23", ["--speculative-algorithm", "NGRAM"], "overlap_schedule", True),
        ("0.5.13.post1", ["--speculative-algorithm", "NGRAM"], "overlap_schedule", False),
    ],
)
def test_known_former_disagreements(version: str, argv: list[str], name: str, value: object) -> None:
    model_dir = sglang_cases.MODELS["dense"]
    spec = _spec("sglang", version, model_dir, argv, {})
    shape = load_model_shape(model_dir)
    assert getattr(planner_settings(spec, shape, plan_inputs(spec)[1]), name) == value
