"""Run SGLang's own argument validation on a batch of launch argvs (inside the engine venv).

Reads `{"cases": [{"argv": [...], "env": {...}}], "fields": [...]}` on stdin, writes one JSON
list on stdout: per case `{"ok": bool, "error": "Type: message" | null, "values": {field: value}}`.

SGLang's validation asks the GPU questions. This harness answers them as a 96 GB
SM 12.0 (Blackwell RTX PRO 6000-class) CUDA GPU with flashinfer installed, by replacing the
platform helpers SGLang imported by name (`is_cuda` -> True, `get_device_sm` -> 120, memory
capacity -> 96 GiB, ...). This file runs only under the engine's interpreter; it is not a test.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys

GPU_MEMORY_MIB = 96 * 1024
VALIDATION_MODULES = ("sglang.srt.server_args", "sglang.srt.arg_groups")
GPU_FACTS: dict[str, object] = {
    "is_cuda": True,
    "is_cuda_alike": True,
    "is_hip": False,
    "is_npu": False,
    "is_musa": False,
    "is_xpu": False,
    "is_mps": False,
    "is_cpu": False,
    "is_hpu": False,
    "is_sm90_supported": False,
    "is_sm100_supported": False,
    "is_sm120_supported": True,
    "is_blackwell_supported": True,
    "is_blackwell": True,
    "is_hopper_with_cuda_12_3": False,
    "is_flashinfer_available": True,
    "is_triton_kernels_available": False,
    "is_host_cpu_arm64": False,
}


def _patch_platform() -> None:
    """Answer SGLang's GPU questions with the facts above, in every module that imported them."""
    # Only the validation modules: kernels imported later must still see the real (CPU) machine.
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(VALIDATION_MODULES):
            continue
        for attr, value in GPU_FACTS.items():
            if hasattr(module, attr):
                setattr(module, attr, lambda *a, _v=value, **k: _v)
        if hasattr(module, "get_device_sm"):
            module.get_device_sm = lambda *a, **k: 120  # type: ignore[attr-defined]
        if hasattr(module, "get_device_memory_capacity"):
            module.get_device_memory_capacity = lambda *a, **k: GPU_MEMORY_MIB  # type: ignore[attr-defined]
        if hasattr(module, "get_device_capability"):
            module.get_device_capability = lambda *a, **k: (12, 0)  # type: ignore[attr-defined]


PLATFORM_FACTS: dict[str, object] = {
    "is_cuda": True, "is_hip": False, "is_npu": False, "is_xpu": False, "is_musa": False, "is_mps": False,
    "is_sm90": False, "is_sm100": False, "is_sm100_or_sm110": False, "is_sm110": False, "is_sm120": True,
    "is_blackwell": True, "is_hopper_with_cuda_12_3": False, "has_amx": False, "has_flashinfer": True,
    "device_sm": 120, "device_capability": (12, 0),
}  # fmt: skip


def _override_platform_context() -> None:
    """Releases from 0.5.19 read one platform object; it has its own override hook."""
    try:
        from sglang.srt import runtime_context
    except ImportError:
        return
    if not hasattr(runtime_context, "override_platform"):
        return
    known = set(getattr(runtime_context, "_PLATFORM_PROBES", ())) | set(
        getattr(runtime_context, "_PLATFORM_VALUES", ())
    )
    facts = {k: v for k, v in PLATFORM_FACTS.items() if k in known}
    runtime_context.override_platform(**facts).install()


def _run_case(prepare, argv: list[str], env: dict[str, str], fields: list[str]) -> dict[str, object]:  # type: ignore[no-untyped-def]
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr):
            args = prepare(argv)
            # 0.5.23 builds an unresolved record; resolution (validation) is a separate step.
            if hasattr(args, "resolve_once"):
                args.resolve_once()
        resolved = args.resolved_dict() if hasattr(args, "resolved_dict") else vars(args)
        values = {f: resolved.get(f) for f in fields}
        return {"ok": True, "error": None, "values": values}
    except SystemExit as exc:  # argparse rejects, saying why on its last stderr line
        said = stderr.getvalue().strip().splitlines()
        return {"ok": False, "error": f"SystemExit: {exc.code}: {said[-1] if said else ''}", "values": {}}
    except Exception as exc:
        if os.environ.get("HARNESS_TRACE"):
            import traceback

            traceback.print_exc()
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "values": {}}
    finally:
        for k, old in saved.items():
            if old is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = old


def main() -> None:
    request = json.load(sys.stdin)
    os.environ["HF_HUB_OFFLINE"] = "1"  # configs are local directories; never reach the hub
    logging.disable(logging.CRITICAL)
    with contextlib.suppress(ImportError):  # the hook module exists from 0.5.13 on; patch it too
        import sglang.srt.arg_groups.speculative_hook  # noqa: F401
    from sglang.srt import server_args
    from sglang.srt.configs import model_config  # noqa: F401  (imported before the patch)

    _patch_platform()
    _override_platform_context()
    results = [
        _run_case(server_args.prepare_server_args, c["argv"], c.get("env", {}), request["fields"])
        for c in request["cases"]
    ]
    json.dump(results, sys.stdout, default=str)


if __name__ == "__main__":
    main()
