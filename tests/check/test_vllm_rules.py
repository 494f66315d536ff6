"""Every vLLM rule has its own case: a launch that triggers it, and a near-identical one that does not."""

from __future__ import annotations

import json

import pytest

from specpilot.check import check_args
from specpilot.engines.vllm.rules import RULES

HYBRID = "Qwen3NextForCausalLM"
DENSE = "Qwen3ForCausalLM"


def sc(**config: object) -> list[str]:
    return ["--speculative-config", json.dumps(config)]


#: rule id -> (argv that fires it, argv that does not, architecture, effect on speculative config)
CASES: dict[str, tuple[list[str], list[str], str, dict[str, object]]] = {
    "vllm-prefix-caching-default": ([], ["--no-enable-prefix-caching"], HYBRID, {}),
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
}
#: the near miss of the MTP rule is the same flags on a model vLLM has an MTP drafter for
QUIET_ARCH = {"vllm-mtp-needs-mtp-layers": HYBRID}
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
    config, env = MODEL_CONFIG.get(rule_id), ENV.get(rule_id, {})
    result = check_args("vllm", "0.32.0", ["--model", "m", *fires], env, arch, model_config=config)
    finding = next((f for f in result.findings if f.rule == rule_id), None)
    assert finding is not None
    if rule.severity == "error":
        assert not result.ok and finding.fix is not None
    for key, value in effect.items():
        effective = json.loads(str(result.effective_values["speculative_config"]))
        assert effective[key] == value
    near = check_args(
        "vllm", "0.32.0", ["--model", "m", *quiet], env, QUIET_ARCH.get(rule_id, arch), model_config=config
    )
    assert rule_id not in {f.rule for f in near.findings}


def test_negated_boolean_and_short_alias() -> None:
    result = check_args(
        "vllm", "0.32.0", ["--model", "m", "--no-enable-prefix-caching", "-tp", "2"], {}, DENSE
    )
    assert result.ok
    assert result.effective_values["enable_prefix_caching"] is False
    assert result.effective_values["tensor_parallel_size"] == 2


def test_context_length_follows_vllm_derivation() -> None:
    from specpilot.check.context_len import vllm_context_len

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
