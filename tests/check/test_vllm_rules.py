"""Every vLLM rule has its own case: a launch that triggers it, and a near-identical one that does not."""

from __future__ import annotations

import json

import pytest

from specpilot.check import GpuFacts, check_args
from specpilot.engines.vllm.rules import RULES

HYBRID = "Qwen3NextForCausalLM"
DENSE = "Qwen3ForCausalLM"


def sc(**config: object) -> list[str]:
    return ["--speculative-config", json.dumps(config)]


#: rule id -> (argv that fires it, argv that does not, architecture, effect on speculative config)
CASES: dict[str, tuple[list[str], list[str], str, dict[str, object]]] = {
    "vllm-prefix-caching-default": ([], ["--no-enable-prefix-caching"], HYBRID, {}),
    "vllm-max-num-batched-tokens-default": ([], ["--max-num-batched-tokens", "4096"], DENSE, {}),
    "vllm-max-num-seqs-default": ([], ["--max-num-seqs", "64"], DENSE, {}),
    "vllm-prefix-caching-default-2x": ([], ["--enable-prefix-caching"], HYBRID, {}),
    "vllm-gpu-memory-utilization-default-2x": ([], ["--gpu-memory-utilization", "0.8"], DENSE, {}),
    "vllm-spec-config-json": (
        ["--speculative-config", "{method:mtp}"],
        sc(method="mtp", num_speculative_tokens=1),
        HYBRID,
        {},
    ),
    "vllm-spec-method-unknown": (
        sc(method="MTP", num_speculative_tokens=1),
        sc(method="mtp", num_speculative_tokens=1),
        HYBRID,
        {},
    ),
    "vllm-spec-method-inferred": (
        sc(model="ngram", num_speculative_tokens=3),
        sc(method="ngram", num_speculative_tokens=3),
        DENSE,
        {"method": "ngram"},
    ),
    "vllm-spec-mtp-alias": (
        sc(method="qwen3_next_mtp", num_speculative_tokens=2),
        sc(method="mtp", num_speculative_tokens=2),
        HYBRID,
        {"method": "mtp"},
    ),
    "vllm-spec-tokens-without-drafter": (
        sc(method="eagle3", num_speculative_tokens=3),
        sc(method="eagle3", model="/d", num_speculative_tokens=3),
        DENSE,
        {},
    ),
    "vllm-spec-tokens-required": (
        sc(method="ngram"),
        sc(method="ngram", num_speculative_tokens=3),
        DENSE,
        {},
    ),
    "vllm-ngram-lookup-range": (
        sc(method="ngram", num_speculative_tokens=3, prompt_lookup_min=5, prompt_lookup_max=2),
        sc(method="ngram", num_speculative_tokens=3, prompt_lookup_min=1, prompt_lookup_max=2),
        DENSE,
        {},
    ),
    "vllm-mtp-needs-mtp-layers": (
        sc(method="mtp", num_speculative_tokens=1),
        sc(method="mtp", num_speculative_tokens=1),
        DENSE,
        {},
    ),
    "vllm-max-model-len-over-model": (["--max-model-len", "8192"], ["--max-model-len", "4K"], DENSE, {}),
    "vllm-max-model-len-over-model-allowed": (
        ["--max-model-len", "8192"],
        ["--max-model-len", "4096"],
        DENSE,
        {},
    ),
    "vllm-reasoning-parser-missing": ([], ["--reasoning-parser", "qwen3"], HYBRID, {}),
}
#: the near miss of the MTP rule is the same flags on a model vLLM has an MTP drafter for
QUIET_ARCH = {"vllm-mtp-needs-mtp-layers": HYBRID}
#: rules of the 0.2x line are exercised on 0.26.0, the rest on 0.32.0
RULE_VERSION = {
    "vllm-prefix-caching-default-2x": "0.26.0",
    "vllm-gpu-memory-utilization-default-2x": "0.26.0",
}
#: the model's config.json (the tiny demo model's 4,096 positions) and env, where a rule reads them
SHORT_MODEL = {"architectures": [DENSE], "max_position_embeddings": 4096}
MODEL_CONFIG = {
    "vllm-max-model-len-over-model": SHORT_MODEL,
    "vllm-max-model-len-over-model-allowed": SHORT_MODEL,
}
ENV = {"vllm-max-model-len-over-model-allowed": {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}}


def test_every_rule_has_a_case() -> None:
    assert {r.id for r in RULES} == set(CASES)


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_fires_on_its_case_and_not_on_the_near_miss(rule_id: str) -> None:
    fires, quiet, arch, effect = CASES[rule_id]
    rule = next(r for r in RULES if r.id == rule_id)
    version = RULE_VERSION.get(rule_id, "0.32.0")
    config, env = MODEL_CONFIG.get(rule_id), ENV.get(rule_id, {})
    result = check_args(
        "vllm", version, ["--model", "m", *fires], env, arch, hybrid=arch == HYBRID, model_config=config
    )
    finding = next((f for f in result.findings if f.rule == rule_id), None)
    assert finding is not None
    if rule.severity == "error":
        assert not result.ok and finding.fix is not None
    for key, value in effect.items():
        effective = json.loads(str(result.effective_values["speculative_config"]))
        assert effective[key] == value
    near_arch = QUIET_ARCH.get(rule_id, arch)
    near = check_args(
        "vllm",
        version,
        ["--model", "m", *quiet],
        env,
        near_arch,
        hybrid=near_arch == HYBRID,
        model_config=config,
    )
    assert rule_id not in {f.rule for f in near.findings}


def test_negated_boolean_and_short_alias() -> None:
    result = check_args(
        "vllm", "0.32.0", ["--model", "m", "--no-enable-prefix-caching", "-tp", "2"], {}, DENSE
    )
    assert result.ok
    assert result.effective_values["enable_prefix_caching"] is False
    assert result.effective_values["tensor_parallel_size"] == 2


@pytest.mark.parametrize(
    ("version", "hybrid", "prefix_caching", "utilization"),
    [
        ("0.26.0", True, False, 0.9),  # 0.2x: prefix caching opt-in for mamba/GDN models
        ("0.26.0", False, True, 0.9),
        ("0.32.0", True, True, 0.92),  # 0.3x: on for every model; the 0.32.0 table's default
    ],
)
def test_line_defaults_are_effective_values(
    version: str, hybrid: bool, prefix_caching: bool, utilization: float
) -> None:
    result = check_args("vllm", version, ["--model", "m"], {}, HYBRID if hybrid else DENSE, hybrid=hybrid)
    assert result.effective_values["enable_prefix_caching"] is prefix_caching
    assert result.effective_values["gpu_memory_utilization"] == utilization


@pytest.mark.parametrize(
    ("gpu", "env", "argv", "seqs", "batched"),
    [
        (GpuFacts(memory_gib=139.8, name="NVIDIA H200"), {}, [], 1024, 8192),
        (GpuFacts(memory_gib=79.3, name="NVIDIA A100-SXM4-80GB"), {}, [], 256, 2048),
        (GpuFacts(memory_gib=23.5), {}, [], 256, 2048),
        (GpuFacts(memory_gib=139.8, name="H200"), {}, ["--max-num-batched-tokens", "512"], 512, 512),
        (GpuFacts(memory_gib=139.8), {"VLLM_TARGET_DEVICE": "cpu"}, ["-tp", "2"], 256, 4096),
    ],
)
def test_batch_defaults_follow_the_device(
    gpu: GpuFacts, env: dict[str, str], argv: list[str], seqs: int, batched: int
) -> None:
    """get_batch_defaults: >= 70 GiB non-A100 GPUs get bigger batches; the CPU backend's are
    per TP rank; max_num_seqs never exceeds max_num_batched_tokens."""
    result = check_args("vllm", "0.26.0", ["--model", "m", *argv], env, DENSE, gpu)
    assert result.effective_values["max_num_seqs"] == seqs
    # the flag takes vLLM's human-readable ints ("8k"): a given value stays text
    assert str(result.effective_values["max_num_batched_tokens"]) == str(batched)


def test_context_length_follows_vllm_derivation() -> None:
    from specpilot.engines.context_len import vllm_context_len

    assert vllm_context_len({"max_position_embeddings": 40960}) == 40960
    # the smallest key wins; model_max_length overrides
    assert vllm_context_len({"max_position_embeddings": 8192, "seq_length": 4096}) == 4096
    assert vllm_context_len({"max_position_embeddings": 8192, "model_max_length": 131072}) == 131072
    # rope factor scales it, except llama3; yarn starts from the original length
    assert (
        vllm_context_len(
            {"max_position_embeddings": 32768, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}
        )
        == 65536
    )
    assert (
        vllm_context_len(
            {"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}
        )
        == 131072
    )
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    assert vllm_context_len({"max_position_embeddings": 40960, "rope_scaling": yarn}) == 131072
    # multimodal wrappers: the text config decides
    assert vllm_context_len({"text_config": {"max_position_embeddings": 262144}}) == 262144
    assert vllm_context_len({}) is None


def test_context_length_error_carries_the_fix_and_the_env_turns_it_into_a_warning() -> None:
    argv = ["--model", "m", "--max-model-len", "8192"]
    refused = check_args("vllm", "0.32.0", argv, {}, DENSE, model_config=SHORT_MODEL)
    finding = next(f for f in refused.findings if f.rule == "vllm-max-model-len-over-model")
    assert "(8192)" in finding.message and "(4096)" in finding.message
    assert finding.fix is not None and finding.fix.args == ("--max-model-len", "4096")
    allowed = check_args(
        "vllm", "0.32.0", argv, {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "true"}, DENSE, model_config=SHORT_MODEL
    )
    assert allowed.ok
    assert check_args("vllm", "0.32.0", argv, {}, DENSE).ok  # no config read: nothing to compare with
