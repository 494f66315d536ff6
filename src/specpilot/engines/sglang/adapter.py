"""SGLang's adapter: everything specpilot knows of SGLang, gathered from this package's modules."""

from __future__ import annotations

from packaging.version import Version

from specpilot.engines.adapter import Engine, EngineLog, LaunchCommand, ReleaseWindow
from specpilot.engines.sglang import (
    bounds,
    draft,
    flags,
    loglines,
    metrics,
    phases,
    releases,
    rules,
    signatures,
)
from specpilot.engines.sglang.releases import release_rules
from specpilot.engines.starts import StartEstimate


def release_window(version: str) -> ReleaseWindow:
    """The `SglangRelease` row of `version`, as the window of releases its arithmetic covers."""
    row = release_rules(version)
    first, last = Version(row.first), Version(row.last)
    window = first.base_version if first == last else f"{first}-{last}"
    return ReleaseWindow(f"SGLang {window}", lambda release: first <= release <= last)


ENGINE = Engine(
    name="sglang",
    display_name="SGLang",
    newest_version=releases.NEWEST_VERIFIED,
    supported_releases=releases.CHECK_ACCEPTS,
    release_tables=flags.release_tables,
    release_window=release_window,
    measured=releases.MEASURED,
    draft=draft.DRAFT,
    startup_phases=phases.PHASES,
    model_flag="--model-path",
    default_command=("python3", "-m", "sglang.launch_server"),
    launch=LaunchCommand(
        modules={"sglang.launch_server": ""},
        serve_program="sglang",
        model_positional=False,
        examples=("python -m sglang.launch_server ...", "sglang serve ..."),
        missing_model_fix="add --model-path DIR",
    ),
    distributions=("sglang",),
    env_prefixes=("SGLANG_", "SGL_"),
    rules=rules.RULES,
    env_replacements=rules.ENV_REPLACEMENTS,
    value_ranges={r.dest: r for r in flags.VALUE_RANGES},
    field_of_dest=flags.FIELD_OF_DEST,
    context_len=rules.context_len,
    context_field="context_length",
    log=EngineLog(loglines.QUANTITIES, loglines.MARKERS, loglines.LOADED, loglines.LOADED_LINE),
    signatures=signatures.SIGNATURES,
    serving_bounds=bounds.SERVING_BOUNDS,
    spec_metrics=(metrics.SPEC_ACCEPTANCE,),
    generated_tokens_metric=metrics.GENERATED_TOKENS,
    running_requests_metric=metrics.RUNNING_REQUESTS,
    # sglang --api-key: every OpenAI route requires the bearer token
    api_key_flag="--api-key",
    preemption=metrics.RETRACTIONS,
    start=StartEstimate(
        240.0,
        90.0,
        "SGLang 0.5.17 on an H200 (a 27B model): 90-240 s for a first start, 60-90 s once its kernels are "
        "cached",
    ),
    # none: 0.5.10-0.5.23 read --api-key/--admin-api-key only from argv or a --config
    # YAML file (srt/server_args.py); no environment variable
    secret_flag_env={},
)
