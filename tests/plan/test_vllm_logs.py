"""The vLLM planner against numbers real vLLM servers printed (tests/data/startup_logs/vllm)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specpilot.engines.logfacts import LogFacts
from specpilot.models.shape import load_model_shape
from specpilot.plan.effective import effective_args
from specpilot.plan.vllm.planner import parse_vllm_log, plan_vllm
from specpilot.spec import Spec

REPO = Path(__file__).resolve().parents[2]
LOGS = REPO / "tests" / "data" / "startup_logs" / "vllm"
PLANNED = sorted(p.stem for p in LOGS.glob("*.json") if json.loads(p.read_text())["config"])
ALL = sorted(p.stem for p in LOGS.glob("*.json"))


def _case(name: str) -> tuple[dict[str, object], str]:
    meta = json.loads((LOGS / f"{name}.json").read_text())
    return meta, (LOGS / f"{name}.log").read_text()


def _spec(meta: dict[str, object]) -> Spec:
    return Spec.model_validate(
        {
            "name": "log-case",
            "model": {"path": str(REPO / str(meta["config"]))},
            "gpu": {
                "memory_gib": float(str(meta.get("gpu_memory_gib", 24.0))),
                "count": int(str(meta["gpu_count"])),
            },
            "engine": {"name": "vllm", "version": "0.26.0", "args": list(meta["flags"])},  # type: ignore[call-overload]
        }
    )


@pytest.mark.parametrize("name", ALL)
def test_parser_reads_every_printed_number(name: str) -> None:
    meta, text = _case(name)
    parsed = parse_vllm_log(text)
    for key, value in meta["printed"].items():  # type: ignore[attr-defined]
        assert getattr(parsed, key) == pytest.approx(value), key


@pytest.mark.parametrize("name", PLANNED)
def test_kv_tokens_and_concurrency_match_the_engine(name: str) -> None:
    """Calibrated with the log's "Available KV cache memory": KV tokens within 2%."""
    meta, text = _case(name)
    spec = _spec(meta)
    shape = load_model_shape(spec.model_dir())
    args = effective_args(spec, shape)
    plan = plan_vllm(spec, shape, args, parse_vllm_log(text))
    printed = meta["printed"]
    assert plan.kv_tokens == pytest.approx(printed["kv_tokens"], rel=0.02)  # type: ignore[index]
    assert plan.details.max_concurrency == pytest.approx(printed["max_concurrency"], abs=0.02)
    default_seqs = int(str(meta.get("default_max_num_seqs", 256)))
    assert plan.max_running_requests == int(args.get_int("max_num_seqs") or default_seqs)


def test_hybrid_mtp_block_size_and_groups_match_vllm_layout() -> None:
    """Qwen3.6-27B TP2 + MTP3 with fp8 KV: 1600-token blocks, 17 attention + 48 GDN layers."""
    meta, text = _case("club3090-642-qwen36-27b-int4-tp2-mtp3")
    spec = _spec(meta)
    plan = plan_vllm(
        spec,
        load_model_shape(spec.model_dir()),
        effective_args(spec, load_model_shape(spec.model_dir())),
        parse_vllm_log(text),
    )
    assert plan.details.attention_block_size_tokens == 1600
    assert plan.details.kv_cache_groups == 4
    # 426 blocks exactly as printed; the log's 2-decimal GiB (11.05) can cost one block.
    assert plan.state_slots == pytest.approx(426, abs=1)


def _incident_spec(*flags: str) -> Spec:
    return Spec.model_validate(
        {
            "name": "incident-vllm",
            "model": {"path": str(REPO / "examples/models/qwen3.6-27b-vllm")},
            "gpu": {"memory_gib": 95.6, "name": "RTX PRO 6000"},
            "engine": {"name": "vllm", "version": "0.26.0", "args": list(flags)},
        }
    )


def test_too_many_seqs_for_the_mamba_blocks_is_a_problem_with_its_fix() -> None:
    spec = _incident_spec(
        "--max-model-len",
        "262144",
        "--gpu-memory-utilization",
        "0.75",
        "--max-num-seqs",
        "1024",
        "--speculative-config",
        '{"method": "qwen3_5_mtp", "num_speculative_tokens": 3}',
    )
    plan = plan_vllm(
        spec, load_model_shape(spec.model_dir()), effective_args(spec, load_model_shape(spec.model_dir()))
    )
    codes = {p.code: p for p in plan.problems}
    assert "max_num_seqs_above_mamba_blocks" in codes
    fix = codes["max_num_seqs_above_mamba_blocks"].fix
    assert fix is not None and fix.args == ("--max-num-seqs", str(plan.state_slots))
    assert not plan.fits
    flags = [
        *plan.recommended_args,
        "--speculative-config",
        '{"method": "qwen3_5_mtp", "num_speculative_tokens": 3}',
    ]
    fixed = _incident_spec(*flags)
    replanned = plan_vllm(
        fixed, load_model_shape(fixed.model_dir()), effective_args(fixed, load_model_shape(fixed.model_dir()))
    )
    assert replanned.fits, replanned.problems
    assert replanned.max_running_requests <= replanned.state_slots


def test_enforce_eager_has_no_graph_memory_and_no_block_limit() -> None:
    spec = _incident_spec(
        "--max-model-len",
        "32768",
        "--enforce-eager",
        "--max-num-seqs",
        "1024",
        "--gpu-memory-utilization",
        "0.75",
    )
    plan = plan_vllm(
        spec, load_model_shape(spec.model_dir()), effective_args(spec, load_model_shape(spec.model_dir()))
    )
    graph = next(t for t in plan.terms if t.name == "CUDA graph memory")
    assert graph.gib == 0
    assert plan.state_slots > 0
    assert plan.fits
    assert plan.state_slots < 1024  # the same seqs would be refused with CUDA graphs


def test_no_kv_memory_recommends_the_utilization_that_starts() -> None:
    spec = _incident_spec("--max-model-len", "32768", "--gpu-memory-utilization", "0.55")
    args = effective_args(spec, load_model_shape(spec.model_dir()))
    plan = plan_vllm(spec, load_model_shape(spec.model_dir()), args)
    problem = next(p for p in plan.problems if p.code == "no_kv_memory")
    assert problem.fix is not None and problem.fix.args[0] == "--gpu-memory-utilization"
    assert problem.fix.args[1] in plan.recommended_args
    fixed = _incident_spec(*plan.recommended_args)
    replanned = plan_vllm(
        fixed, load_model_shape(fixed.model_dir()), effective_args(fixed, load_model_shape(fixed.model_dir()))
    )
    assert replanned.fits, replanned.problems


def test_auto_max_model_len_fits_the_kv_memory() -> None:
    spec = _incident_spec("--max-model-len", "auto", "--gpu-memory-utilization", "0.68", "--enforce-eager")
    plan = plan_vllm(
        spec, load_model_shape(spec.model_dir()), effective_args(spec, load_model_shape(spec.model_dir()))
    )
    assert 0 < plan.details.max_model_len_tokens < 262144
    assert plan.fits
    assert plan.details.max_concurrency >= 1.0


def test_kv_cache_memory_bytes_replaces_the_profiled_budget() -> None:
    spec = _incident_spec("--max-model-len", "8192", "--kv-cache-memory-bytes", "8G", "--enforce-eager")
    shape = load_model_shape(spec.model_dir())
    plan = plan_vllm(spec, shape, effective_args(spec, shape))
    available = next(t for t in plan.terms if t.name == "available KV cache memory")
    assert available.gib == pytest.approx(8.0)
    # the same pool as a start whose profiler had measured 8 GiB for the KV cache
    without_flag = _incident_spec("--max-model-len", "8192", "--enforce-eager")
    measured = plan_vllm(
        without_flag, shape, effective_args(without_flag, shape), LogFacts(available_kv_gib=8.0)
    )
    assert plan.details == measured.details
    assert plan.kv_tokens == measured.kv_tokens


def test_weights_count_the_mtp_head_only_as_draft_and_vision_unless_skipped() -> None:
    shape = load_model_shape(REPO / "examples/models/qwen3.6-27b-vllm")
    mtp = '{"method": "qwen3_5_mtp", "num_speculative_tokens": 3}'

    def weights(*flags: str) -> float:
        spec = _incident_spec("--max-model-len", "8192", *flags)
        return plan_vllm(spec, shape, effective_args(spec, shape)).weights_gib

    plain, with_mtp = weights(), weights("--speculative-config", mtp)
    text_only = weights("--language-model-only")
    assert with_mtp - plain == pytest.approx(shape.mtp_param_count * 2 / 2**30)
    assert plain - text_only == pytest.approx(shape.vision_param_count * 2 / 2**30)


def test_0_32_turns_on_prefix_caching_for_hybrid_models() -> None:
    """0.32 defaults prefix caching on: "align" mode holds 2 mamba blocks per group, not 1."""
    flags = ["--max-model-len", "32768", "--enforce-eager", "--kv-cache-memory-bytes", "20G"]
    shape = load_model_shape(REPO / "examples/models/qwen3.6-27b-vllm")
    blocks = {}
    for version in ("0.26.0", "0.32.0"):
        spec = _incident_spec(*flags).model_copy(
            update={"engine": _incident_spec(*flags).engine.model_copy(update={"version": version})}
        )
        plan = plan_vllm(spec, shape, effective_args(spec, shape))
        blocks[version] = plan.details.blocks_per_request
    assert blocks == {"0.26.0": 42 + 3, "0.32.0": 42 + 6}


def test_weights_beyond_the_budget_recommend_more_gpus_not_a_zero_length() -> None:
    """Qwen3-Next-80B bf16 on two 80 GB GPUs: 74 GiB of weights per GPU leave nothing."""
    flags = ["--tensor-parallel-size", "2", "--max-model-len", "65536"]
    spec = Spec.model_validate(
        {
            "name": "next-tp2",
            "model": {"path": str(REPO / "examples/models/qwen3-next-80b-a3b")},
            "gpu": {"memory_gib": 79.19, "count": 2},
            "engine": {"name": "vllm", "version": "0.26.0", "args": flags},
        }
    )
    plan = plan_vllm(
        spec, load_model_shape(spec.model_dir()), effective_args(spec, load_model_shape(spec.model_dir()))
    )
    assert not plan.fits
    assert [p.code for p in plan.problems] == ["no_kv_memory"]
    assert plan.recommended_args[:2] == ["--tensor-parallel-size", "4"]
    assert "0" not in plan.recommended_args
    tp4 = [*flags[2:], "--tensor-parallel-size", "4"]
    spec4 = spec.model_copy(update={"engine": spec.engine.model_copy(update={"args": tp4})})
    assert plan_vllm(
        spec4, load_model_shape(spec.model_dir()), effective_args(spec4, load_model_shape(spec.model_dir()))
    ).fits


@pytest.mark.parametrize(("mode", "fits"), [("balanced", True), ("throughput", False)])
def test_throughput_mode_doubles_max_num_seqs_past_the_mamba_blocks(mode: str, fits: bool) -> None:
    """vLLM 0.33.0 on an H200: the default 1,024 sequences fit the hybrid's Mamba blocks; throughput
    mode doubles the unset limit to 2,048, which the engine refuses at CUDA graph capture."""
    spec = Spec.model_validate(
        {
            "name": "throughput-vllm",
            "model": {"path": str(REPO / "examples/models/qwen3.6-27b-vllm")},
            "gpu": {"memory_gib": 139.8, "name": "H200"},
            "engine": {
                "name": "vllm",
                "version": "0.33.0",
                "args": ["--max-model-len", "4096", "--performance-mode", mode],
            },
        }
    )
    shape = load_model_shape(spec.model_dir())
    plan = plan_vllm(spec, shape, effective_args(spec, shape))
    assert 1024 < plan.state_slots < 2048
    assert plan.fits is fits
    if not fits:
        problem = next(p for p in plan.problems if p.code == "max_num_seqs_above_mamba_blocks")
        assert "2048 (doubled by --performance-mode throughput)" in problem.message
        assert problem.fix is not None and problem.fix.args == ("--max-num-seqs", str(plan.state_slots))
