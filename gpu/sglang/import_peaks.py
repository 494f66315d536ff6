"""Turn the starts `gpu/sglang/job.py` recorded into test data: log, spec, plan and samples per start.

    python3 gpu/sglang/import_peaks.py JOBDIR [PREFIX]

JOBDIR is `job-logs.tar.gz` unpacked (job.py's stash: one folder per start with `engine.log`,
`<name>.toml`, `<name>.plan.json`, `up.json`, `samples/memory.tsv`, `samples/lines.tsv`). Each
start lands in tests/data/gpu-runs/<PREFIX><name>/ with its files as recorded (the samples
compressed: `plan --samples` reads `memory.tsv.gz`), except the spec: the model path points at
gpu/models/qwen3.6-27b-text (the config job.py wrote), and the machine's launcher command and
paths in the environment are dropped (the engine's own SGLANG_* variables stay), so
`specpilot plan` runs on exactly what the engine ran.
"""

from __future__ import annotations

import gzip
import shutil
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "gpu-runs"
MODEL = "gpu/models/qwen3.6-27b-text"
#: the models job.py starts, by the folder name it gives them (gpu/models/ holds their configs)
MODELS = {
    "qwen3.6-27b-text": ("gpu/models/qwen3.6-27b-text", "the text-only Qwen3.6-27B-shaped model"),
    "qwen3-8b": ("gpu/models/qwen3-8b", "the Qwen3-8B-shaped model"),
}


def model_of(spec: dict[str, Any]) -> tuple[str, str]:
    """(the repository's model folder, in words) for the model a recorded spec ran."""
    return MODELS.get(Path(spec["model"]["path"]).name, (MODEL, MODELS["qwen3.6-27b-text"][1]))


KEPT_FILES = ("engine.log", "up.json")


def starts(job_dir: Path) -> list[Path]:
    """Folders holding one start: its engine log and its samples."""
    return sorted(
        p.parent.parent
        for p in job_dir.rglob("samples/memory.tsv")
        if (p.parent.parent / "engine.log").exists()
    )


def spec_of(folder: Path) -> Path:
    specs = [p for p in folder.glob("*.toml") if not p.stem.endswith("-as-given")]
    if len(specs) != 1:
        raise SystemExit(f"{folder}: expected one spec, found {[p.name for p in specs]}")
    return specs[0]


def portable_spec(spec_path: Path, target: Path) -> str:
    spec = tomllib.loads(spec_path.read_text())
    spec["model"]["path"] = str(Path("../" * len(target.relative_to(REPO).parts)) / model_of(spec)[0])
    engine = spec["engine"]
    engine.pop("command", None)
    engine["env"] = {k: v for k, v in engine.get("env", {}).items() if k.startswith("SGLANG_")}
    note = f"# Imported by gpu/sglang/import_peaks.py from {spec_path.name}: the start as job.py ran it.\n"
    return note + tomli_w.dumps(spec)


def write_readmes(target: Path, spec_path: Path, folder: Path) -> None:
    """Where the start came from, in its folder and its samples' (the provenance each file needs)."""
    spec = tomllib.loads(spec_path.read_text())
    stamp = (folder / "samples" / "lines.tsv").read_text().split("\t", 1)[0]
    day = time.strftime("%Y-%m-%d", time.gmtime(float(stamp)))
    args = " ".join(spec["engine"]["args"])
    text = (
        f"# {target.name}\n\nRecorded by specpilot on one NVIDIA H200, {day}, with `gpu/sglang/job.py` "
        f"(imported by `gpu/sglang/import_peaks.py`): SGLang {spec['engine']['version']} on a "
        f"{spec['gpu']['memory_gib']} GiB card (the H200's 139.8, or emulated by a process holding the "
        f"rest), random weights, {model_of(spec)[1]}, `{args}`.\n\n"
        "`engine.log`: the engine's whole log; `up.json`: `specpilot up --json`; `samples/memory.tsv.gz`: "
        "GPU memory used every 20 ms (NVML); `samples/lines.tsv`: each log line with the time it landed. "
        "`gpu/sglang/fit.py` reads them (docs/gpu-validation.md).\n"
    )
    (target / "README.md").write_text(text)
    (target / "samples" / "README.md").write_text(text)


def main(job_dir: str, prefix: str = "") -> None:
    for folder in starts(Path(job_dir)):
        spec_path = spec_of(folder)
        name = spec_path.stem
        target = DATA / f"{prefix}{name}"
        (target / "samples").mkdir(parents=True, exist_ok=True)
        (target / f"{name}.toml").write_text(portable_spec(spec_path, target))
        for kept in (*KEPT_FILES, f"{name}.plan.json"):
            if (folder / kept).exists():
                shutil.copyfile(folder / kept, target / kept)
        memory = (folder / "samples" / "memory.tsv").read_bytes()
        (target / "samples" / "memory.tsv.gz").write_bytes(gzip.compress(memory, mtime=0))
        shutil.copyfile(folder / "samples" / "lines.tsv", target / "samples" / "lines.tsv")
        write_readmes(target, spec_path, folder)
        size_kib = sum(p.stat().st_size for p in target.rglob("*") if p.is_file()) // 1024
        print(f"{name}: {folder} -> {target.relative_to(REPO)} ({size_kib} KiB)")


if __name__ == "__main__":
    main(*sys.argv[1:])
