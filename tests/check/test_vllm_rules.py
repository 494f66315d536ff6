"""Every vLLM rule has its own case: a launch that triggers it, and a near-identical one that does not."""

from __future__ import annotations

import json

import pytest

from specpilot.check import GpuFacts, check_args
from specpilot.engines.vllm.rules import RULES

HYBRID = "Qwen3NextForCausalLM"
DENSE = "Qwen3ForCausalLM"
LFM2 = "Lfm2ForCausalLM"


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
    "vllm-throughput-doubles-batched-tokens": (
        ["--performance-mode", "throughput"],
        ["--performance-mode", "throughput", "--max-num-batched-tokens", "4096"],
        DENSE,
        {},
    ),
    "vllm-throughput-doubles-max-num-seqs": (
        ["--performance-mode", "throughput"],
        ["--performance-mode", "balanced"],
        HYBRID,
        {},
    ),
    "vllm-hybrid-spec-unpadded-mamba-page": (
        sc(method="ngram", num_speculative_tokens=2, prompt_lookup_max=4, prompt_lookup_min=2),
        [],
        LFM2,
        {},
    ),
    "vllm-cudagraph-memory-unprofiled": ([], ["--enforce-eager"], DENSE, {}),
    "vllm-max-model-len-over-model": (["--max-model-len", "8192"], ["--max-model-len", "4K"], DENSE, {}),
    "vllm-max-model-len-over-model-allowed": (
        ["--max-model-len", "8192"],
        ["--max-model-len", "4096"],
        DENSE,
        {},
    ),
    "vllm-reasoning-parser-missing": ([], ["--reasoning-parser", "qwen3"], HYBRID, {}),
    # 0.34: the KV cache sized after CUDA graph capture, its defaults, the ignored mamba mode
    "vllm-extensible-kv-cache-default": ([], ["--no-enable-extensible-kv-cache"], DENSE, {}),
    "vllm-extensible-kv-cache-unsupported": (
        ["--enable-extensible-kv-cache", "--kv-cache-memory-bytes", "8G"],
        ["--kv-cache-memory-bytes", "8G"],
        DENSE,
        {},
    ),
    "vllm-gpu-memory-utilization-default-34": ([], ["--gpu-memory-utilization", "0.8"], DENSE, {}),
    "vllm-block-size-default-34": ([], ["--block-size", "16"], DENSE, {}),
    "vllm-mamba-cache-mode-ignored": (["--mamba-cache-mode", "align"], [], HYBRID, {}),
}
#: the near miss of the MTP rule is the same flags on a model vLLM has an MTP drafter for
QUIET_ARCH = {"vllm-mtp-needs-mtp-layers": HYBRID}
#: rules of the 0.2x line are exercised on 0.26.0, the rest on 0.32.0
RULE_VERSION = {
    "vllm-prefix-caching-default-2x": "0.26.0",
    "vllm-gpu-memory-utilization-default-2x": "0.26.0",
    "vllm-extensible-kv-cache-default": "0.34.0",
    "vllm-extensible-kv-cache-unsupported": "0.34.0",
    "vllm-gpu-memory-utilization-default-34": "0.34.0",
    "vllm-block-size-default-34": "0.34.0",
    "vllm-mamba-cache-mode-ignored": "0.34.0",
}
#: the model's config.json (the tiny demo model's 4,096 positions) and env, where a rule reads them
SHORT_MODEL = {"architectures": [DENSE], "max_position_embeddings": 4096}
MODEL_CONFIG = {
    "vllm-max-model-len-over-model": SHORT_MODEL,
    "vllm-max-model-len-over-model-allowed": SHORT_MODEL,
}
ENV = {
    "vllm-max-model-len-over-model-allowed": {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"},
    "vllm-cudagraph-memory-unprofiled": {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"},
}


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
        ("0.34.0", True, True, 1.0),  # 0.34: the KV cache sized after capture, from all of it
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


def test_the_mtp_alias_line_names_the_method_given_not_the_whole_config() -> None:
    result = check_args(
        "vllm", "0.32.0", ["--model", "m", *sc(method="qwen3_5_mtp", num_speculative_tokens=2)], {}, HYBRID
    )
    (finding,) = [f for f in result.findings if f.rule == "vllm-spec-mtp-alias"]
    # vLLM's own words (vllm/config/speculative.py), with the method where its name belongs
    assert finding.message == "method `qwen3_5_mtp` is deprecated and replaced with mtp."


H200 = GpuFacts(memory_gib=139.8, name="NVIDIA H200")


@pytest.mark.parametrize(
    ("argv", "seqs", "batched"),
    [
        ([], 2048, 16384),  # both unset: the H200's 1024 / 8192, doubled
        (["--max-num-seqs", "64"], 64, 16384),  # a given value is never doubled
        (["--max-num-batched-tokens", "1024"], 1024, 1024),  # doubled seqs, capped at the batch
        (["--performance-mode", "balanced"], 1024, 8192),
    ],
)
def test_throughput_mode_doubles_only_the_unset_batch_limits(
    argv: list[str], seqs: int, batched: int
) -> None:
    """arg_utils.py: the doubling happens before max_num_seqs is capped at max_num_batched_tokens."""
    mode = [] if "--performance-mode" in argv else ["--performance-mode", "throughput"]
    result = check_args("vllm", "0.33.0", ["--model", "m", *mode, *argv], {}, DENSE, H200)
    assert result.effective_values["max_num_seqs"] == seqs
    assert str(result.effective_values["max_num_batched_tokens"]) == str(batched)


@pytest.mark.parametrize(
    ("version", "accepted", "refused"),
    [
        ("0.32.0", ("medusa", "mlp_speculator"), ("step5_mtp",)),
        ("0.33.0", ("step5_mtp",), ("medusa", "mlp_speculator")),
    ],
)
def test_speculative_methods_follow_the_release(
    version: str, accepted: tuple[str, ...], refused: tuple[str, ...]
) -> None:
    """0.33.0's SpeculativeMethod gains step5_mtp and drops medusa and mlp_speculator."""

    def unknown(method: str) -> bool:
        config = sc(method=method, model="/d", num_speculative_tokens=2)
        result = check_args("vllm", version, ["--model", "m", *config], {}, DENSE)
        return "vllm-spec-method-unknown" in {f.rule for f in result.findings}

    assert not any(unknown(m) for m in accepted)
    assert all(unknown(m) for m in refused)


def test_step5_has_an_mtp_drafter_from_0_33() -> None:
    config = sc(method="mtp", num_speculative_tokens=1)
    old = check_args("vllm", "0.32.0", ["--model", "m", *config], {}, "Step5ForCausalLM")
    new = check_args("vllm", "0.33.0", ["--model", "m", *config], {}, "Step5ForCausalLM")
    assert "vllm-mtp-needs-mtp-layers" in {f.rule for f in old.findings}
    assert new.ok


def test_0_33_is_checked_against_its_own_table() -> None:
    result = check_args("vllm", "0.33.0", ["--model", "m", "--monokernel"], {}, DENSE)
    assert "release-unverified" not in {f.rule for f in result.findings}
    assert result.ok  # a flag 0.33.0 added
    older = check_args("vllm", "0.32.0", ["--model", "m", "--monokernel"], {}, DENSE)
    flag = next(f for f in older.findings if f.rule == "flag-not-yet")
    assert "appears in 0.33.0" in flag.message


@pytest.mark.parametrize(
    ("version", "flag", "ok", "prefix_caching"),
    [
        ("0.32.0", "--no-enable-prefix-caching", True, False),
        ("0.32.0", "--disable-prefix-caching", False, None),  # 0.33.0's spelling
        ("0.33.0", "--disable-prefix-caching", True, False),
        ("0.33.0", "--no-enable-prefix-caching", True, False),  # hidden, still accepted
        ("0.33.0", "--enable-prefix-caching", True, True),
    ],
)
def test_enable_disable_pairs_of_0_33(version: str, flag: str, ok: bool, prefix_caching: bool | None) -> None:
    """vLLM 0.33.0's EnableDisableAction (utils/argparse_utils.py): --disable-x sets x False."""
    result = check_args("vllm", version, ["--model", "m", flag], {}, DENSE)
    assert result.ok is ok
    if ok:
        assert result.effective_values["enable_prefix_caching"] is prefix_caching


@pytest.mark.parametrize(
    ("argv", "env", "extensible", "utilization", "block"),
    [
        ([], {}, True, 1.0, 64),
        (["--no-enable-extensible-kv-cache"], {}, False, 0.92, 64),
        (["--kv-cache-memory-bytes", "8G"], {}, False, 0.92, 64),  # a fixed pool: measured no more
        (["--num-gpu-blocks-override", "100"], {}, False, 0.92, 64),
        (["--block-size", "32", "--gpu-memory-utilization", "0.85"], {}, True, 0.85, 32),
        ([], {"VLLM_TARGET_DEVICE": "cpu"}, False, 0.92, None),  # the CPU backend's own block size
    ],
)
def test_vllm_034_sizes_the_kv_cache_after_capture_where_it_can(
    argv: list[str], env: dict[str, str], extensible: bool, utilization: float, block: int | None
) -> None:
    result = check_args("vllm", "0.34.0", ["--model", "m", *argv], env, DENSE)
    assert result.ok, result.findings
    assert result.effective_values["enable_extensible_kv_cache"] is extensible
    assert float(str(result.effective_values["gpu_memory_utilization"])) == utilization
    assert result.effective_values["block_size"] == block
    # 0.33 knows none of it: the table's 0.92, no block size, no such flag
    older = check_args("vllm", "0.33.0", ["--model", "m"], {}, DENSE)
    assert older.effective_values["gpu_memory_utilization"] == 0.92
    assert older.effective_values.get("block_size") is None
