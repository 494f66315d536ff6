"""Every SGLang rule has its own case: a launch that triggers it, and a near-identical one that does not."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from specpilot.check import GpuFacts, check_args
from specpilot.engines.sglang.rules import RULES

HYBRID = "Qwen3_5ForConditionalGeneration"
DENSE = "Qwen3ForCausalLM"
NEXTN = ["--speculative-algorithm", "NEXTN"]
STEPS_314 = [
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
]
STEPS_348 = [
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "4",
    "--speculative-num-draft-tokens",
    "8",
]
DRAFT = ["--speculative-draft-model-path", "/models/drafter"]
#: a UNO launch 0.5.23's validator accepts (linear mode, FA3, one GPU)
UNO_OK = [
    "--speculative-algorithm", "UNO", "--uno-lora-path", "/adapters/uno",
    "--speculative-num-draft-tokens", "4", "--attention-backend", "fa3",
]  # fmt: skip


@dataclass(frozen=True)
class Case:
    version: str
    fires: list[str]
    quiet: list[str]
    arch: str = HYBRID
    env: dict[str, str] = field(default_factory=dict)
    #: for adjusts: dest -> value the engine ends up with when the rule fires
    effect: dict[str, object] = field(default_factory=dict)
    #: the model's config.json, for rules that read it
    config: dict[str, object] | None = None


#: Qwen3-8B's positions (config.json: max_position_embeddings 40960, no rope scaling)
QWEN3_8B = {"architectures": [DENSE], "max_position_embeddings": 40960}


CASES: dict[str, Case] = {
    # check's GPU facts default to a 96 GiB card: the H20/H200/96 GB row
    "sglang-gpu-chunked-prefill-default": Case(
        "0.5.13.post1", [], ["--chunked-prefill-size", "4096"], effect={"chunked_prefill_size": 8192}
    ),
    "sglang-gpu-cuda-graph-max-bs-default": Case(
        "0.5.13.post1", ["--tp-size", "4"], ["--cuda-graph-max-bs", "64"], effect={"cuda_graph_max_bs": 512}
    ),
    "sglang-gpu-cuda-graph-max-bs-default-b": Case(
        "0.5.23", [], ["--cuda-graph-max-bs-decode", "64"], effect={"cuda_graph_max_bs_decode": 256}
    ),
    "sglang-context-length-over-model": Case(
        "0.5.13.post1",
        ["--context-length", "300000"],
        ["--context-length", "40960"],
        arch=DENSE,
        config=QWEN3_8B,
    ),
    "sglang-context-length-over-model-allowed": Case(
        "0.5.23",
        ["--context-length", "300000"],
        ["--context-length", "32768"],
        arch=DENSE,
        env={"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"},
        config=QWEN3_8B,
    ),
    "sglang-spec-algorithm-unknown": Case("0.5.13.post1", ["--speculative-algorithm", "MTP"], NEXTN),
    "sglang-mamba-auto-no-buffer": Case(
        "0.5.13.post1",
        ["--disable-radix-cache"],
        ["--disable-radix-cache", "--mamba-scheduler-strategy", "extra_buffer"],
        arch=DENSE,
        effect={"mamba_scheduler_strategy": "no_buffer"},
    ),
    "sglang-mamba-extra-buffer-unsupported": Case(
        "0.5.13.post1",
        ["--mamba-scheduler-strategy", "extra_buffer"],
        ["--mamba-scheduler-strategy", "no_buffer"],
        arch="Lfm2ForCausalLM",
    ),
    "sglang-mamba-extra-buffer-needs-radix": Case(
        "0.5.13.post1",
        ["--mamba-scheduler-strategy", "extra_buffer", "--disable-radix-cache"],
        ["--mamba-scheduler-strategy", "extra_buffer"],
    ),
    "sglang-mamba-extra-buffer-page-size": Case(
        "0.5.13.post1",
        ["--mamba-scheduler-strategy", "extra_buffer", "--page-size", "48"],
        ["--mamba-scheduler-strategy", "extra_buffer", "--page-size", "64"],
    ),
    # the case: lazy + speculative with an explicit draft-token count
    "sglang-mamba-extra-buffer-lazy-spec": Case(
        "0.5.13.post1",
        ["--mamba-scheduler-strategy", "extra_buffer_lazy", *NEXTN, *STEPS_314],
        ["--mamba-scheduler-strategy", "extra_buffer", *NEXTN, *STEPS_314],
        env={"SGLANG_ENABLE_SPEC_V2": "1"},
    ),
    "sglang-mamba-extra-buffer-lazy-spec-b": Case(
        "0.5.14",
        ["--mamba-radix-cache-strategy", "extra_buffer_lazy", *NEXTN, *STEPS_314],
        ["--mamba-radix-cache-strategy", "extra_buffer_lazy", *NEXTN],
    ),
    "sglang-mamba-no-buffer-page-size": Case(
        "0.5.13.post1",
        ["--page-size", "64"],
        ["--page-size", "64", "--disable-radix-cache"],
        effect={"page_size": 1},
    ),
    "sglang-mamba-no-buffer-no-overlap": Case(
        "0.5.13.post1",
        [],
        ["--disable-radix-cache"],
        effect={"disable_overlap_schedule": True},
    ),
    "sglang-mamba-no-buffer-spec-radix": Case(
        "0.5.13.post1",
        [*NEXTN, "--mamba-scheduler-strategy", "no_buffer"],
        [*NEXTN, "--mamba-scheduler-strategy", "no_buffer", "--disable-radix-cache"],
    ),
    "sglang-mamba-auto-resolve": Case(
        "0.5.23",
        [],
        ["--disable-radix-cache"],
        effect={"mamba_radix_cache_strategy": "extra_buffer"},
    ),
    "sglang-mamba-auto-overlap-off": Case(
        "0.5.23",
        ["--linear-attn-backend", "cutedsl"],
        ["--linear-attn-backend", "cutedsl", "--disable-overlap-schedule"],
        effect={"mamba_radix_cache_strategy": "no_buffer", "disable_overlap_schedule": True},
    ),
    "sglang-mamba-extra-buffer-dense": Case(
        "0.5.23",
        ["--mamba-radix-cache-strategy", "extra_buffer"],
        [],
        arch=DENSE,
    ),
    "sglang-mamba-extra-buffer-unsupported-b": Case(
        "0.5.23",
        ["--mamba-radix-cache-strategy", "extra_buffer"],
        ["--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule"],
        arch="Lfm2ForCausalLM",
    ),
    "sglang-mamba-extra-buffer-page-size-b": Case(
        "0.5.23",
        ["--mamba-radix-cache-strategy", "extra_buffer", "--page-size", "48"],
        ["--mamba-radix-cache-strategy", "extra_buffer", "--page-size", "64"],
    ),
    "sglang-mamba-no-buffer-page-size-b": Case(
        "0.5.23",
        ["--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule", "--page-size", "64"],
        ["--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule", "--page-size", "1"],
    ),
    "sglang-mamba-no-buffer-overlap-b": Case(
        "0.5.23",
        [*NEXTN, "--mamba-radix-cache-strategy", "no_buffer"],
        [*NEXTN, "--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule"],
    ),
    "sglang-page-size-default": Case(
        "0.5.23", [], ["--page-size", "16"], arch=DENSE, effect={"page_size": 1}
    ),
    "sglang-spec-nextn-is-eagle": Case(
        "0.5.23",
        NEXTN,
        ["--speculative-algorithm", "EAGLE"],
        arch=DENSE,
        effect={"speculative_algorithm": "EAGLE"},
    ),
    "sglang-spec-upper-case": Case(
        "0.5.23",
        ["--speculative-algorithm", "eagle3", *DRAFT],
        ["--speculative-algorithm", "EAGLE3", *DRAFT],
        arch=DENSE,
        effect={"speculative_algorithm": "EAGLE3"},
    ),
    "sglang-dflash-needs-draft": Case(
        "0.5.23",
        ["--speculative-algorithm", "DFLASH"],
        ["--speculative-algorithm", "DFLASH", *DRAFT],
        arch=DENSE,
    ),
    "sglang-dflash-single-step": Case(
        "0.5.23",
        ["--speculative-algorithm", "DFLASH", *DRAFT, *STEPS_348],
        [*NEXTN, *STEPS_348],
        arch=DENSE,
        effect={"speculative_num_steps": 1, "speculative_eagle_topk": 1},
    ),
    "sglang-dflash-block-size": Case(
        "0.5.23",
        ["--speculative-algorithm", "DFLASH", *DRAFT],
        ["--speculative-algorithm", "DFLASH", *DRAFT, "--speculative-num-draft-tokens", "8"],
        arch=DENSE,
        effect={"speculative_num_draft_tokens": 16},
    ),
    "sglang-dflash-window-below-block": Case(
        "0.5.23",
        ["--speculative-algorithm", "DFLASH", *DRAFT, "--speculative-draft-window-size", "8"],
        ["--speculative-algorithm", "DFLASH", *DRAFT, "--speculative-draft-window-size", "16"],
        arch=DENSE,
    ),
    # adaptive speculation: EAGLE/NEXTN at topk 1 only (0.5.17's and 0.5.23's speculative hook)
    "sglang-adaptive-unsupported": Case(
        "0.5.23",
        ["--speculative-algorithm", "NGRAM", "--speculative-adaptive"],
        [*NEXTN, "--speculative-adaptive"],
        effect={"speculative_adaptive": False},
    ),
    # 0.5.17's candidates are 0, 1, 3, 7: five steps start only from 0.5.21 on
    "sglang-adaptive-steps": Case(
        "0.5.17",
        [*NEXTN, "--speculative-adaptive", "--speculative-num-steps", "5", "--speculative-eagle-topk", "1"],
        [*NEXTN, "--speculative-adaptive", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1"],
    ),
    "sglang-adaptive-params": Case(
        "0.5.23",
        [*NEXTN, "--speculative-adaptive", "--speculative-num-steps", "5"],
        [*NEXTN, "--speculative-num-steps", "5", "--speculative-eagle-topk", "1"],
        effect={"speculative_num_steps": 5, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 6},
    ),
    "sglang-dspark-needs-draft": Case(
        "0.5.19",
        ["--speculative-algorithm", "DSPARK"],
        ["--speculative-algorithm", "DSPARK", *DRAFT],
        arch=DENSE,
    ),
    "sglang-dspark-single-step": Case(
        "0.5.23",
        ["--speculative-algorithm", "DSPARK", *DRAFT, *STEPS_348],
        ["--speculative-algorithm", "EAGLE3", *DRAFT, *STEPS_348],
        arch=DENSE,
        effect={"speculative_num_steps": 1, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 8},
    ),
    "sglang-dspark-tokens-mismatch": Case(
        "0.5.23",
        [
            "--speculative-algorithm",
            "DSPARK",
            *DRAFT,
            "--speculative-dspark-block-size",
            "3",
            "--speculative-num-draft-tokens",
            "5",
        ],
        [
            "--speculative-algorithm",
            "DSPARK",
            *DRAFT,
            "--speculative-dspark-block-size",
            "3",
            "--speculative-num-draft-tokens",
            "4",
        ],
        arch=DENSE,
    ),
    "sglang-dspark-draft-tokens": Case(
        "0.5.23",
        ["--speculative-algorithm", "DSPARK", *DRAFT, "--speculative-dspark-block-size", "3"],
        ["--speculative-algorithm", "DSPARK", *DRAFT, "--speculative-num-draft-tokens", "5"],
        arch=DENSE,
        effect={"speculative_num_draft_tokens": 4},
    ),
    "sglang-dspark-tokens-at-least-2": Case(
        "0.5.23",
        ["--speculative-algorithm", "DSPARK", *DRAFT, "--speculative-num-draft-tokens", "1"],
        ["--speculative-algorithm", "DSPARK", *DRAFT, "--speculative-num-draft-tokens", "2"],
        arch=DENSE,
    ),
    "sglang-dspark-max-running-48": Case(
        "0.5.19",
        ["--speculative-algorithm", "DSPARK", *DRAFT],
        ["--speculative-algorithm", "DSPARK", *DRAFT, "--max-running-requests", "8"],
        arch=DENSE,
        effect={"max_running_requests": 48},
    ),
    "sglang-uno-no-drafter": Case("0.5.23", [*UNO_OK, *DRAFT], UNO_OK, arch=DENSE),
    "sglang-uno-needs-lora": Case(
        "0.5.23", [a for a in UNO_OK if a not in ("--uno-lora-path", "/adapters/uno")], UNO_OK, arch=DENSE
    ),
    "sglang-uno-needs-draft-tokens": Case(
        "0.5.23", [*UNO_OK[:4], "--attention-backend", "fa3"], UNO_OK, arch=DENSE
    ),
    "sglang-uno-linear": Case(
        "0.5.23",
        UNO_OK,
        [*UNO_OK, "--speculative-eagle-topk", "2", "--speculative-num-steps", "3"],
        arch=DENSE,
        effect={"speculative_num_steps": 1, "speculative_eagle_topk": 1},
    ),
    "sglang-uno-single-gpu": Case("0.5.23", [*UNO_OK, "--tp-size", "2"], UNO_OK, arch=DENSE),
    "sglang-uno-fa3": Case(
        "0.5.23", [a for a in UNO_OK if a not in ("--attention-backend", "fa3")], UNO_OK, arch=DENSE
    ),
    "sglang-torch-compile-with-decode-graphs": Case(
        "0.5.23",
        ["--enable-torch-compile"],
        ["--enable-torch-compile", "--disable-decode-cuda-graph"],
        arch=DENSE,
    ),
    "sglang-spec-max-running-48": Case(
        "0.5.13.post1",
        [*NEXTN, "--disable-radix-cache"],
        [*NEXTN, "--disable-radix-cache", "--max-running-requests", "64"],
        effect={"max_running_requests": 48},
    ),
    "sglang-spec-v2-topk": Case(
        "0.5.10.post1",
        [*NEXTN, *STEPS_348],
        [*NEXTN, *STEPS_314],
        arch=DENSE,
        env={"SGLANG_ENABLE_SPEC_V2": "1"},
    ),
    "sglang-spec-v2-overlap-on": Case(
        "0.5.10.post1",
        [*NEXTN, "--disable-overlap-schedule"],
        ["--disable-overlap-schedule"],
        arch=DENSE,
        env={"SGLANG_ENABLE_SPEC_V2": "1"},
        effect={"disable_overlap_schedule": False},
    ),
    "sglang-spec-overlap-off": Case(
        "0.5.10.post1",
        NEXTN,
        [],
        arch=DENSE,
        effect={"disable_overlap_schedule": True},
    ),
    "sglang-spec-v2-off-overlap": Case(
        "0.5.13.post1",
        NEXTN,
        ["--speculative-algorithm", "NGRAM"],
        arch=DENSE,
        env={"SGLANG_ENABLE_SPEC_V2": "0"},
        effect={"disable_overlap_schedule": True},
    ),
    "sglang-spec-no-overlap-ngram-dflash": Case(
        "0.5.13.post1",
        ["--speculative-algorithm", "NGRAM"],
        NEXTN,
        arch=DENSE,
        effect={"disable_overlap_schedule": True},
    ),
    "sglang-spec-no-mixed-chunk": Case(
        "0.5.13.post1",
        [*NEXTN, "--enable-mixed-chunk"],
        ["--enable-mixed-chunk"],
        arch=DENSE,
        effect={"enable_mixed_chunk": False},
    ),
    "sglang-spec-no-mixed-chunk-b": Case(
        "0.5.23",
        ["--speculative-algorithm", "STANDALONE", *DRAFT, "--enable-mixed-chunk"],
        [*NEXTN, "--enable-mixed-chunk"],
        arch=DENSE,
        effect={"enable_mixed_chunk": False},
    ),
    "sglang-spec-params-together": Case(
        "0.5.23",
        [*NEXTN, "--speculative-eagle-topk", "4"],
        [*NEXTN, *STEPS_348],
        arch=DENSE,
    ),
    "sglang-spec-auto-params": Case(
        "0.5.23",
        NEXTN,
        [*NEXTN, *STEPS_348],
        arch=DENSE,
        effect={"speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4},
    ),
    "sglang-spec-steps-need-topk": Case(
        "0.5.23",
        [*NEXTN, "--speculative-num-steps", "3"],
        [*NEXTN, *STEPS_314],
        arch=DENSE,
    ),
    "sglang-spec-trtllm-topk": Case(
        "0.5.13.post1",
        [*NEXTN, *STEPS_348, "--attention-backend", "trtllm_mha"],
        [*NEXTN, *STEPS_314, "--attention-backend", "trtllm_mha"],
        arch=DENSE,
    ),
    "sglang-spec-topk1-draft-tokens": Case(
        "0.5.23",
        [
            *NEXTN,
            "--speculative-num-steps",
            "3",
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            "6",
        ],
        [*NEXTN, *STEPS_314],
        arch=DENSE,
        effect={"speculative_num_draft_tokens": 4},
    ),
    "sglang-spec-topk-paged-backend": Case(
        "0.5.13.post1",
        [*NEXTN, *STEPS_348, "--page-size", "64", "--attention-backend", "flashmla"],
        [*NEXTN, *STEPS_348, "--page-size", "64", "--attention-backend", "fa3"],
        arch=DENSE,
    ),
    "sglang-spec-topk-paged-backend-a": Case(
        "0.5.12",
        [*NEXTN, *STEPS_348, "--page-size", "64", "--attention-backend", "triton"],
        [*NEXTN, *STEPS_348, "--page-size", "64", "--attention-backend", "fa3"],
        arch=DENSE,
    ),
    "sglang-spec-topk-no-overlap": Case(
        "0.5.12",
        [*NEXTN, *STEPS_348],
        [*NEXTN, *STEPS_314],
        arch=DENSE,
        effect={"disable_overlap_schedule": True},
    ),
    "sglang-ngram-topk": Case(
        "0.5.23",
        ["--speculative-algorithm", "NGRAM"],
        NEXTN,
        arch=DENSE,
        effect={"speculative_eagle_topk": 10},
    ),
    "sglang-ngram-draft-tokens": Case(
        "0.5.23",
        ["--speculative-algorithm", "NGRAM"],
        ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "8"],
        arch=DENSE,
        effect={"speculative_num_draft_tokens": 12},
    ),
    "sglang-ngram-steps": Case(
        "0.5.23",
        ["--speculative-algorithm", "NGRAM"],
        ["--speculative-algorithm", "NGRAM", "--speculative-num-steps", "2"],
        arch=DENSE,
        effect={"speculative_num_steps": 1},
    ),
    "sglang-ngram-paged-backend": Case(
        "0.5.23",
        ["--speculative-algorithm", "NGRAM", "--page-size", "64", "--attention-backend", "fa3"],
        ["--speculative-algorithm", "NGRAM", "--page-size", "64", "--attention-backend", "flashinfer"],
        arch=DENSE,
    ),
    "sglang-reasoning-parser-missing": Case("0.5.13.post1", [], ["--reasoning-parser", "qwen3"]),
}


def _rule_ids(
    version: str, argv: list[str], env: dict[str, str], arch: str, config: dict[str, object] | None = None
) -> tuple[set[str], object]:
    result = check_args("sglang", version, argv, env, arch, model_config=config)
    return {f.rule for f in result.findings}, result


def test_every_rule_has_a_case() -> None:
    assert {r.id for r in RULES} == set(CASES)


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_fires_on_its_case_and_not_on_the_near_miss(rule_id: str) -> None:
    case = CASES[rule_id]
    rule = next(r for r in RULES if r.id == rule_id)
    fired, result = _rule_ids(case.version, case.fires, case.env, case.arch, case.config)
    assert rule_id in fired
    if rule.severity == "error":
        assert not result.ok  # type: ignore[attr-defined]
        finding = next(f for f in result.findings if f.rule == rule_id)  # type: ignore[attr-defined]
        assert finding.fix is not None, "every error says how to fix it"
    for dest, value in case.effect.items():
        assert result.effective_values[dest] == value  # type: ignore[attr-defined]
    quiet, _ = _rule_ids(case.version, case.quiet, case.env, case.arch, case.config)
    assert rule_id not in quiet


@pytest.mark.parametrize(
    ("memory_gib", "tp", "chunked", "graph_bs"),
    [(24.0, 1, 2048, 24), (80.0, 1, 8192, 256), (139.8, 4, 8192, 512), (180.0, 1, 16384, 512)],
)
def test_gpu_memory_defaults_follow_the_card(memory_gib: float, tp: int, chunked: int, graph_bs: int) -> None:
    result = check_args(
        "sglang", "0.5.19", ["--tp-size", str(tp)], {}, DENSE, GpuFacts(memory_gib=memory_gib)
    )
    assert result.effective_values["chunked_prefill_size"] == chunked
    assert result.effective_values["cuda_graph_max_bs_decode"] == graph_bs


def test_context_length_follows_sglang_derivation() -> None:
    from specpilot.engines.context_len import sglang_context_len

    assert sglang_context_len(QWEN3_8B) == 40960
    # the first key in SGLang's order wins, not the smallest
    assert sglang_context_len({"seq_length": 8192, "max_position_embeddings": 4096}) == 8192
    assert sglang_context_len({"max_position_embeddings": 32768, "rope_scaling": {"factor": 4.0}}) == 131072
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    assert sglang_context_len({"max_position_embeddings": 40960, "rope_scaling": yarn}) == 40960
    assert sglang_context_len({}) == 2048


def test_qwen3_8b_context_300000_is_refused_with_the_models_length() -> None:
    result = check_args("sglang", "0.5.13", ["--context-length", "300000"], {}, DENSE, model_config=QWEN3_8B)
    finding = next(f for f in result.findings if f.rule == "sglang-context-length-over-model")
    assert not result.ok and "(300000)" in finding.message and "(40960)" in finding.message
    assert finding.fix is not None and finding.fix.args == ("--context-length", "40960")


def test_adaptive_steps_follow_the_release() -> None:
    """0.5.23 starts five adaptive steps, 0.5.17 refuses them; neither drafts with the flag alone
    off its default middle candidate (3)."""
    five = [*NEXTN, "--speculative-adaptive", "--speculative-num-steps", "5", "--speculative-eagle-topk", "1"]
    assert "sglang-adaptive-steps" not in _rule_ids("0.5.23", five, {}, HYBRID, None)[0]
    fired, result = _rule_ids("0.5.17", five, {}, HYBRID, None)
    assert "sglang-adaptive-steps" in fired
    finding = next(f for f in result.findings if f.rule == "sglang-adaptive-steps")  # type: ignore[attr-defined]
    assert "[0, 1, 3, 7]" in finding.message and finding.fix.args == (
        "--speculative-num-steps",
        "3",
    )  # the nearer, fewer on a tie
    for version in ("0.5.17", "0.5.23"):
        _, alone = _rule_ids(version, [*NEXTN, "--speculative-adaptive"], {}, HYBRID, None)
        assert alone.effective_values["speculative_num_steps"] == 3  # type: ignore[attr-defined]
        assert alone.effective_values["speculative_num_draft_tokens"] == 4  # type: ignore[attr-defined]
    # before the first release read, the flag is only a flag: no adaptive rule speaks
    assert not {r for r in _rule_ids("0.5.14", five, {}, HYBRID, None)[0] if "adaptive" in r}
