"""A model's config.json and safetensors headers read on the host the engine runs on.

`[model] path` names the model as the engine sees it: an absolute path, `~/` for
the host user's home, or an `org/name` Hugging Face id looked up in the host's hub
cache (`~/.cache/huggingface/hub/models--org--name/snapshots/*/`), as the engines do
(on this machine too, where HF_HUB_CACHE and HF_HOME are honoured).
One exception: a relative path that exists beside the spec file on this machine is
a local copy of the model's config (as `examples/` ships them) and is read here.
Every failure is one line naming the host and the path.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path
from typing import TYPE_CHECKING

from specpilot.errors import SpecpilotError, UserError
from specpilot.models.files import ModelFiles, header_length, parse_config, parse_header, read_local_model
from specpilot.spec import HUB_ID, Spec

if TYPE_CHECKING:  # the host layer (asyncssh) is imported only for a remote model
    from specpilot.hosts.base import Host

#: the hub cache below the host user's home (huggingface_hub's default HF_HUB_CACHE)
HF_HUB_CACHE = ".cache/huggingface/hub"
LIST_TIMEOUT_S = 30.0


#: the model's files, or why they could not be read: check warns with the reason, plan raises it
ModelRead = ModelFiles | UserError | OSError


async def read_spec_model_files(spec: Spec) -> ModelFiles:
    """The model files where the spec's engine will read them: here, or on `[host] target`,
    read in the command's event loop (an SSH host is a connection of that loop).

    A relative path with no such folder here may still be a Hub id or a path below the host
    user's home, so both are tried; when they fail too, the error says first that the folder
    is missing here (a spec copied out of `examples/` without its `models/`), not only what the
    Hub cache or the SSH host said."""
    try:
        if _here(spec):
            if _is_hub_id_only(spec):
                from specpilot.hosts import LocalHost

                async with LocalHost() as local:
                    return await read_host_model(local, spec.model.path, hf_cache=str(local_hub_cache()))
            return read_local_model(spec.model_dir())
        from specpilot.hosts import open_host_section

        async with open_host_section(spec.host) as host:
            return await read_host_model(host, spec.model.path)
    except SpecpilotError as err:
        raise _missing_here(spec, err) or err from None


async def read_model(spec: Spec) -> ModelRead:
    """`read_spec_model_files`, or the error saying why it failed (check runs without the
    model's rules and says so; plan raises it): one read per command, handed to both."""
    try:
        return await read_spec_model_files(spec)
    except (UserError, OSError) as err:
        return err


def spec_model_files(spec: Spec, read: ModelRead | None = None) -> ModelFiles:
    """The files `read` holds (its error raised); without one, a model folder on this machine,
    read without an event loop. A model on an SSH host or only in the Hub cache is read in the
    command's loop (`read_model`) and handed in: reading it here would need a loop of its own."""
    if isinstance(read, UserError | OSError):
        raise read
    if read is not None:
        return read
    if not _here(spec) or _is_hub_id_only(spec):
        raise SpecpilotError(
            f"the model {spec.model.path} ({spec.host.target}) was not read in the command's event "
            "loop (specpilot bug, rerun with --debug for the traceback)"
        )
    try:
        return read_local_model(spec.model_dir())
    except SpecpilotError as err:
        raise _missing_here(spec, err) or err from None


def _here(spec: Spec) -> bool:
    """The model is read on this machine: a local target, or a copy of it beside the spec."""
    return spec.host.target.strip() == "local" or _local_copy(spec)


def _missing_here(spec: Spec, err: SpecpilotError) -> UserError | None:
    """A read failure as the missing relative folder it most likely is; None for another path."""
    missing = _missing_relative_folder(spec)
    if missing is None:
        return None
    where = "the Hugging Face cache" if spec.host.target.strip() == "local" else spec.host.target
    return UserError(
        f"no model folder {missing} on this machine (and not found through {where} either: {err})",
        field="[model] path",
        fix="point [model] path at the folder holding config.json (a relative path is read "
        "beside the spec file), or give the path as the engine's host sees it",
    )


def _missing_relative_folder(spec: Spec) -> Path | None:
    """The folder a relative `[model] path` names beside the spec (or here, for a pasted
    command), when it does not exist; None for an absolute or `~` path, or one that exists."""
    path = spec.model.path
    if path.startswith("~") or Path(path).is_absolute():
        return None
    folder = spec.model_dir().absolute()
    return None if folder.exists() else folder


def _is_hub_id_only(spec: Spec) -> bool:
    """`[model] path` is an `org/name` Hub id with no such folder here (the engine downloads or
    reads it from its hub cache)."""
    path = spec.model.path
    base = spec.source_path.parent if spec.source_path is not None else Path.cwd()
    return bool(HUB_ID.match(path)) and not (base / path).exists() and not Path(path).exists()


def local_hub_cache() -> Path:
    """This machine's hub cache, as huggingface_hub finds it: HF_HUB_CACHE, HF_HOME/hub, ~/.cache."""
    if cache := os.environ.get("HF_HUB_CACHE"):
        return Path(cache)
    if home := os.environ.get("HF_HOME"):
        return Path(home) / "hub"
    return Path.home() / HF_HUB_CACHE


def _local_copy(spec: Spec) -> bool:
    path = spec.model.path
    if path.startswith("~") or Path(path).is_absolute() or spec.source_path is None:
        return False
    return (spec.source_path.parent / path).exists()


async def read_host_model(host: Host, model_path: str, *, hf_cache: str | None = None) -> ModelFiles:
    """config.json and the safetensors headers of `model_path` on `host`."""
    from specpilot.hosts.errors import HostConfigError, HostError

    try:
        home = await host.home()
        folder = await _model_folder(host, model_path, home, hf_cache or posixpath.join(home, HF_HUB_CACHE))
        config_path = folder if folder.endswith(".json") else posixpath.join(folder, "config.json")
        try:
            config_bytes = await host.read_bytes(config_path)
        except FileNotFoundError:
            raise UserError(
                f"no config.json at {config_path} on {host.target}",
                field="[model] path",
                fix="give the model folder as that host sees it (the engine reads it there), "
                "or copy the model to the host first",
            ) from None
        where = f"{config_path} on {host.target}"
        config = parse_config(config_bytes, where)
        weights_dir = posixpath.dirname(config_path)
        headers = []
        for file in await _safetensors_files(host, weights_dir):
            file_where = f"{file} on {host.target}"
            length = header_length(await host.read_bytes(file, 0, 8), file_where)
            headers.append(parse_header(await host.read_bytes(file, 8, length), file_where))
    except HostConfigError:
        raise  # already names the host and the setting to change
    except (HostError, OSError) as err:
        raise UserError(
            f"cannot read the model at {model_path} on {host.target} ({err})",
            field="[model] path",
            fix="make the model folder readable by the SSH user on that host",
        ) from None
    return ModelFiles(config=config, safetensors_headers=tuple(headers), where=where)


async def _model_folder(host: Host, model_path: str, home: str, hf_cache: str) -> str:
    """The folder (or config.json) `model_path` names on the host."""
    if model_path == "~" or model_path.startswith("~/"):
        return home.rstrip("/") + model_path[1:]
    if posixpath.isabs(model_path):
        return model_path
    in_home = posixpath.join(home, model_path)
    if HUB_ID.match(model_path) and await host.sha256(posixpath.join(in_home, "config.json")) is None:
        return await _hub_snapshot(host, model_path, hf_cache)
    return in_home


async def _hub_snapshot(host: Host, repo_id: str, hf_cache: str) -> str:
    """The snapshot `refs/main` points at, else the newest snapshot holding a config.json."""
    org, name = repo_id.split("/", 1)
    repo_dir = posixpath.join(hf_cache, f"models--{org}--{name}")
    try:
        main = (await host.read_bytes(posixpath.join(repo_dir, "refs", "main"))).decode().strip()
    except FileNotFoundError:
        main = ""
    candidates = [posixpath.join(repo_dir, "snapshots", main)] if main else []
    candidates += sorted(await _list(host, posixpath.join(repo_dir, "snapshots"), "-type", "d"), reverse=True)
    for snapshot in candidates:
        if await host.sha256(posixpath.join(snapshot, "config.json")) is not None:
            return snapshot
    raise UserError(
        f"{repo_id} is not in the Hugging Face cache on {host.target} "
        f"(no {repo_dir}/snapshots/*/config.json)",
        field="[model] path",
        fix=f"download it on that host first (huggingface-cli download {repo_id}), "
        "or give the model folder's path",
    )


async def _safetensors_files(host: Host, folder: str) -> list[str]:
    return sorted(await _list(host, folder, "-name", "*.safetensors"))


async def _list(host: Host, folder: str, *tests: str) -> list[str]:
    """Entries directly in `folder` matching find(1) tests (links followed: hub files are links)."""
    result = await host.run(
        ["find", "-L", folder, "-mindepth", "1", "-maxdepth", "1", *tests],
        timeout_s=LIST_TIMEOUT_S,
        check=False,
    )
    if result.returncode != 0:
        return []
    return [line for line in result.stdout.decode("utf-8", "replace").splitlines() if line]
