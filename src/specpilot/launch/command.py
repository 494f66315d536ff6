"""The exact argv and environment a run starts with, derived from the spec.

What is started is `[engine] command` (or the engine's default program) followed
by `[engine] args` exactly as written, plus the flags the supervisor must rely on
(model, host, port) when the args do not already give them. The environment is
explicit and complete (the host starts the process with nothing inherited): a few
login variables from the host, PYTHONUNBUFFERED=1 so log lines arrive when they
are written, then `[engine] env`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specpilot.engines.adapter import Engine, EngineRelease
from specpilot.engines.argv import read_argv
from specpilot.errors import UserError
from specpilot.secrets import MASK, holds_secret, mask_argv
from specpilot.spec import Spec

#: Login variables taken from the host so the engine finds its Python and home.
HOST_ENV_KEEP = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TMPDIR", "VIRTUAL_ENV")
_SECRET_REF = re.compile(r"^\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)\}$")


@dataclass(frozen=True)
class PlannedLaunch:
    """What will run: the engine, argv, environment, where it listens, what it serves as."""

    engine: Engine
    argv: tuple[str, ...]
    env: dict[str, str]
    env_file_env: dict[str, str]  # the env as recorded on disk: secrets as ${NAME}
    endpoint: str
    served_model_name: str
    #: argv positions holding a secret flag value -> (text before it, env variable carrying it)
    secret_args: dict[int, tuple[str, str]] = field(default_factory=dict)


def host_model_path(spec: Spec, *, home: str, local: bool) -> str:
    """`[model] path` as the engine on the host must see it: `~/` is the host's home
    (no shell expands it); on local runs a relative path that exists beside the spec file is
    taken from there, anything else (a Hub id) goes to the engine as written."""
    model = spec.model.path
    if model == "~" or model.startswith("~/"):
        return home.rstrip("/") + model[1:]
    if local and spec.source_path is not None and not Path(model).is_absolute():
        beside_spec = Path(spec.source_path).parent / model
        if beside_spec.exists():
            return str(beside_spec)
    return model  # absolute, on the host, or a Hub id the engine resolves itself


def engine_program(spec: Spec, engine: Engine, *, model_path: str) -> tuple[list[str], list[str]]:
    """(the program, the flag naming the model): what every command line for `spec` (run by
    `engine`) is built from, by `up` and by `check --fix` alike. The model lives in
    `[model] path` only (the spec refuses it in args), so it is always added here."""
    return list(spec.engine.command or engine.default_command), [engine.model_flag, model_path]


def plan_argv(spec: Spec, release: EngineRelease, *, model_path: str) -> tuple[list[str], str]:
    """argv and the served model name; `release`: the spec's engine release, resolved once
    by the command."""
    program, model_args = engine_program(spec, release.engine, model_path=model_path)
    args = [*spec.engine.args, *model_args]
    read = read_argv(release.table, args)
    for dest, wanted in (("host", spec.server.host), ("port", str(spec.server.port))):
        flag = f"--{dest}"
        use = read.last(dest)
        given = use.text if use is not None else None
        if given is None:
            args += [flag, wanted]
        elif given != wanted:
            raise UserError(
                f"{flag} {given} in [engine] args differs from [server] {flag[2:]} = {wanted}",
                field="[engine] args",
                fix=f"remove {flag} from [engine] args; [server] {flag[2:]} sets it",
            )
    named = read.last("served_model_name")
    served = named.values[0] if named is not None and named.values else None
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
            recorded[name] = f"${{{name}}}" if holds_secret(name, value) else value
    return env, recorded


SECRET_ARG_ENV_PREFIX = "SPECPILOT_ARG_"


def secret_arg_refs(argv: Sequence[str]) -> dict[int, tuple[str, str]]:
    """Where argv holds a secret flag value (`--api-key X`, `--hf-token=X`): position ->
    (the part before the value, the env variable that carries it to the engine)."""
    refs: dict[int, tuple[str, str]] = {}
    for i, (given, shown) in enumerate(zip(argv, mask_argv(argv), strict=True)):
        if given == shown:
            continue
        flag, eq, _ = given.partition("=") if shown.endswith(f"={MASK}") else (argv[i - 1], "", "")
        name = SECRET_ARG_ENV_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", flag.lstrip("-")).upper()
        taken = {ref for _, ref in refs.values()}
        if name in taken:
            name = f"{name}_{i}"
        refs[i] = (f"{flag}=" if eq else "", name)
    return refs


def secret_flags_to_env(argv: list[str], flag_env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """argv without the secret flags the engine also reads from its environment, and
    those variables: `--api-key X` for vLLM becomes VLLM_API_KEY=X. A flag given twice
    or with several values (vLLM takes a list of keys) stays in argv."""
    argv = list(argv)
    moved: dict[str, str] = {}
    for flag, name in flag_env.items():
        spots = [i for i, arg in enumerate(argv) if arg == flag or arg.startswith(f"{flag}=")]
        if len(spots) != 1:
            continue
        at = spots[0]
        if argv[at] != flag:
            moved[name] = argv.pop(at).partition("=")[2]
            continue
        values = list(itertools.takewhile(lambda arg: not arg.startswith("-"), argv[at + 1 :]))
        if len(values) == 1:
            moved[name] = values[0]
            del argv[at : at + 2]
    return argv, moved


def api_key_of(spec: Spec, engine: Engine) -> str | None:
    """The key the spec starts its engine (`engine`) with (its API flag, or the variable the
    engine reads it from): the requests of a job or a bench to that server send it."""
    flag = engine.api_key_flag
    if flag is None:
        return None
    args = list(spec.engine.args)
    given: str | None = None  # the last one given: the engine's parser keeps that one
    for index, arg in enumerate(args):
        if arg == flag and index + 1 < len(args):
            given = args[index + 1]
        elif arg.startswith(f"{flag}="):
            given = arg.partition("=")[2]
    if given is not None:
        return given
    variable = engine.secret_flag_env.get(flag)
    return spec.engine.env.get(variable) if variable else None


def plan_launch(
    spec: Spec,
    release: EngineRelease,
    *,
    host_env: Mapping[str, str],
    local_env: Mapping[str, str],
    model_path: str,
) -> PlannedLaunch:
    """What `spec` starts as, run by `release` (the command resolved it once)."""
    argv, served = plan_argv(spec, release, model_path=model_path)
    env, recorded = plan_env(spec.engine.env, host_env, local_env)
    argv, by_env = secret_flags_to_env(argv, release.engine.secret_flag_env)
    for name, value in by_env.items():
        env[name], recorded[name] = value, f"${{{name}}}"
    refs = secret_arg_refs(argv)
    for position, (prefix, name) in refs.items():
        env[name] = argv[position][len(prefix) :]
        recorded[name] = f"${{{name}}}"
    endpoint = f"http://{_url_host(spec.server.host)}:{spec.server.port}"
    return PlannedLaunch(release.engine, tuple(argv), env, recorded, endpoint, served, refs)


def _url_host(bind_host: str) -> str:
    """Where to reach a server bound to `bind_host` from the host itself."""
    if bind_host in ("0.0.0.0", "", "::"):
        return "127.0.0.1"
    return f"[{bind_host}]" if ":" in bind_host else bind_host
