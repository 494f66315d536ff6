"""Build what the H200 machine needs to run vLLM and specpilot, as parts small enough to carry.

The H200 machine has no package registry, and each command sent to it may carry at most 64 MiB
with the working tree (gpu/README.md), so everything missing from its image travels as one tar
split into parts of at most 56 MiB.
Runs here (where PyPI is reachable) through gpu/prepare.sh, which supplies a recent pip whose
resolver reads PEP 658 metadata instead of downloading every candidate wheel.

Steps, each cached under CACHE_DIR so a second run only re-checks hashes:
1. download the vLLM wheel and read its requirements;
2. resolve them (plus specpilot's own runtime deps) for CPython 3.12 / manylinux x86_64 with
   `pip install --dry-run --report`, then keep only the closure that the image lacks, without
   walking into the heavy optional packages measured as unnecessary (see DROPPED);
3. download those wheels with `pip download --no-deps` and check their sha256 against the report;
4. unpack vLLM, remove what Hopper does not use (see VLLM_TRIM), repack as tar.xz;
5. install the wheels here into a --target folder for the machine's tags, tar.xz it;
6. put site + vLLM + lock file into one tar, split it, write sha256 sums and a manifest.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement

VLLM_VERSION = "0.26.0"
TARGET_PYTHON = "3.12"
# Markers are evaluated for the H200 machine, not for this one.
TARGET_MARKER_ENV = {
    "python_version": TARGET_PYTHON,
    "python_full_version": "3.12.3",
    "platform_machine": "x86_64",
    "platform_system": "Linux",
    "sys_platform": "linux",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}
# pip matches manylinux_2_N tags exactly, so every N a wheel might carry is named.
TARGET_PLATFORMS = (
    "manylinux1_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_31_x86_64",
    "manylinux_2_34_x86_64",
    "manylinux_2_35_x86_64",
    "manylinux_2_39_x86_64",
)
PART_BYTES = 56 * 1024 * 1024
CALL_LIMIT_BYTES = 64 * 1024 * 1024
# Heavy optional packages that a dummy-weight start on Hopper never imports (measured
# 2026-11-29); their own dependencies are not walked either.
DROPPED = frozenset(
    {
        "tokenspeed-triton",
        "nvidia-cutlass-dsl-libs-base",
        "nvidia-cutlass-dsl-libs-core",
        "nvidia-cutlass-dsl-libs-cu12",
        "nvidia-cutlass-dsl-libs-cu13",
        "nvidia-nvvm",
        "nvidia-cuda-nvcc",
        "tilelang",
        "z3-solver",
        "pynvvideocodec",
        "torchcodec",
        "numba",
        "llvmlite",
        "flashinfer-python",
    }
)
# xgrammar imports it at run time without declaring it.
EXTRA_ROOTS = ("apache-tvm-ffi==0.1.10",)
# FA2 (Hopper uses FA3), the Rust router, and deep_gemm builds for other Pythons.
VLLM_TRIM = (
    "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so",
    "vllm/vllm-rs",
    "vllm/third_party/deep_gemm/_C.cpython-310-*.so",
    "vllm/third_party/deep_gemm/_C.cpython-311-*.so",
    "vllm/third_party/deep_gemm/_C.cpython-313-*.so",
    "vllm/third_party/deep_gemm/_C.cpython-314-*.so",
)
BUNDLE_NAME = "specpilot-gpu-carry.tar"
VLLM_TARBALL = f"vllm-{VLLM_VERSION}-trimmed.tar.xz"
SITE_TARBALL = "site-wheels.tar.xz"

GPU_DIR = Path(__file__).resolve().parent
IMAGE_PACKAGES_FILE = GPU_DIR / "image-packages.txt"


def normalize(name: str) -> str:
    """PEP 503 name, so 'PyYAML', 'pyyaml' and 'py_yaml' compare equal."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Pin:
    """One wheel to carry: exact version, where pip found it, and its published hash."""

    name: str
    version: str
    filename: str
    sha256: str


def log(message: str) -> None:
    print(f"[carry] {message}", file=sys.stderr, flush=True)


def run(argv: list[str]) -> None:
    log(" ".join(argv[:6]) + (" ..." if len(argv) > 6 else ""))
    subprocess.run(argv, check=True)


def pip_argv(pip_python: Path, *args: str) -> list[str]:
    # --isolated: this machine's pip config adds local indexes and torch caps meant for here.
    return [
        str(pip_python),
        "-m",
        "pip",
        "--isolated",
        "--cert",
        "/etc/ssl/certs/ca-certificates.crt",
        "--disable-pip-version-check",
        *args,
    ]


def target_args() -> list[str]:
    args = ["--only-binary=:all:", "--python-version", TARGET_PYTHON, "--implementation", "cp"]
    for platform in TARGET_PLATFORMS:
        args += ["--platform", platform]
    return args


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def image_packages() -> set[str]:
    names: set[str] = set()
    for line in IMAGE_PACKAGES_FILE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.add(normalize(line.split("==")[0]))
    return names


def image_versions() -> dict[str, str]:
    versions: dict[str, str] = {}
    for line in IMAGE_PACKAGES_FILE.read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.strip().split("==")
            versions[normalize(name)] = version
    return versions


def specpilot_requirements(repo: Path) -> list[str]:
    """Runtime deps from pyproject.toml, so the carry follows the project's own list."""
    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    return list(project["dependencies"])


def pip_download(pip_python: Path, folder: Path, *requirements: str) -> None:
    """The wheels of `requirements` for the H200 image's platform, without dependencies."""
    run(pip_argv(pip_python, "download", "--no-deps", *target_args(), "-d", str(folder), *requirements))


def vllm_wheel(pip_python: Path, cache: Path) -> Path:
    folder = cache / "vllm-wheel"
    found = sorted(folder.glob(f"vllm-{VLLM_VERSION}-*.whl"))
    if not found:
        pip_download(pip_python, folder, f"vllm=={VLLM_VERSION}")
        found = sorted(folder.glob(f"vllm-{VLLM_VERSION}-*.whl"))
    return found[0]


def wheel_requirements(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        metadata_name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(metadata_name).decode())
    return list(metadata.get_all("Requires-Dist") or [])


def applies(requirement: Requirement, extras: Iterable[str]) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({**TARGET_MARKER_ENV, "extra": extra}) for extra in ("", *extras))


def wanted(requirement: Requirement, skipped: set[str]) -> bool:
    return normalize(requirement.name) not in skipped


def root_requirements(vllm: Path, repo: Path, skipped: set[str]) -> list[Requirement]:
    roots: list[Requirement] = []
    for text in [*wheel_requirements(vllm), *specpilot_requirements(repo), *EXTRA_ROOTS]:
        requirement = Requirement(text)
        if applies(requirement, ()) and wanted(requirement, skipped):
            requirement.marker = None
            roots.append(requirement)
    return roots


def resolve(pip_python: Path, cache: Path, roots: list[Requirement]) -> dict[str, object]:
    """pip's own resolver, run for the target; the report is cached by its inputs."""
    lines = sorted(str(r) for r in roots)
    key = hashlib.sha256("\n".join([*lines, *TARGET_PLATFORMS]).encode()).hexdigest()[:16]
    report_path = cache / f"resolve-{key}.json"
    if not report_path.exists():
        with tempfile.TemporaryDirectory() as scratch:
            requirements = Path(scratch) / "requirements.txt"
            requirements.write_text("\n".join(lines) + "\n")
            partial = Path(scratch) / "report.json"
            run(
                pip_argv(
                    pip_python,
                    "install",
                    "--quiet",
                    "--dry-run",
                    "--ignore-installed",
                    "--target",
                    str(Path(scratch) / "target"),
                    *target_args(),
                    "--report",
                    str(partial),
                    "-r",
                    str(requirements),
                )
            )
            shutil.move(partial, report_path)
    report: dict[str, object] = json.loads(report_path.read_text())
    return report


def closure(report: dict[str, object], roots: list[Requirement], skipped: set[str]) -> list[Pin]:
    """Everything reachable from the roots without passing through a skipped package."""
    installs = report["install"]
    assert isinstance(installs, list)
    by_name = {normalize(item["metadata"]["name"]): item for item in installs}
    pins: dict[str, Pin] = {}
    queue: list[tuple[str, tuple[str, ...]]] = [(normalize(r.name), tuple(sorted(r.extras))) for r in roots]
    seen: set[tuple[str, tuple[str, ...]]] = set()
    while queue:
        name, extras = queue.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        item = by_name[name]
        url = item["download_info"]["url"]
        pins[name] = Pin(
            name=name,
            version=item["metadata"]["version"],
            filename=url.rsplit("/", 1)[-1],
            sha256=item["download_info"]["archive_info"]["hashes"]["sha256"],
        )
        for text in item["metadata"].get("requires_dist") or []:
            requirement = Requirement(text)
            if applies(requirement, extras) and wanted(requirement, skipped):
                queue.append((normalize(requirement.name), tuple(sorted(requirement.extras))))
    return sorted(pins.values(), key=lambda pin: pin.name)


def image_conflicts(report: dict[str, object], pins: list[Pin]) -> list[str]:
    """Carried packages whose declared needs the image's known versions do not meet.

    Installing with --no-deps ignores these; they are listed so a failure on the machine can be
    traced (e.g. mistral_common caps numpy below the image's, which measured harmless).
    """
    known = image_versions()
    installs = report["install"]
    assert isinstance(installs, list)
    carried = {pin.name for pin in pins}
    found = []
    for item in installs:
        name = normalize(item["metadata"]["name"])
        if name not in carried:
            continue
        for text in item["metadata"].get("requires_dist") or []:
            requirement = Requirement(text)
            version = known.get(normalize(requirement.name))
            if version and applies(requirement, ()) and version not in requirement.specifier:
                found.append(f"{name} needs {requirement}; the image has {version}")
    return found


def download(pip_python: Path, cache: Path, pins: list[Pin]) -> list[Path]:
    folder = cache / "wheels"
    missing = [pin for pin in pins if not (folder / pin.filename).exists()]
    if missing:
        pip_download(pip_python, folder, *(f"{pin.name}=={pin.version}" for pin in missing))
    paths = []
    for pin in pins:
        path = folder / pin.filename
        actual = sha256_file(path)
        if actual != pin.sha256:
            raise SystemExit(f"{path.name}: sha256 {actual} but the index published {pin.sha256}")
        paths.append(path)
    return paths


def trimmed(member: str) -> bool:
    return any(member == t or member.startswith(t + "/") or fnmatch.fnmatch(member, t) for t in VLLM_TRIM)


def tar_xz(root: Path, target: Path) -> None:
    """Deterministic tar.xz of root's contents; GNU tar + threaded xz (python's lzma is slower)."""
    partial = target.with_name(target.name + ".partial")
    tar = subprocess.Popen(
        [
            "tar",
            "--sort=name",
            "--mtime=@0",
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "-cf",
            "-",
            "-C",
            str(root),
            ".",
        ],
        stdout=subprocess.PIPE,
    )
    with partial.open("wb") as out:
        subprocess.run(["xz", "-T0", "-6", "-c"], stdin=tar.stdout, stdout=out, check=True)
    if tar.wait() != 0:
        raise SystemExit(f"tar of {root} failed")
    partial.rename(target)


def vllm_tarball(wheel: Path, cache: Path) -> Path:
    """vLLM unpacked minus VLLM_TRIM, as tar.xz; keyed by the wheel and the trim list."""
    key = hashlib.sha256((sha256_file(wheel) + "\n".join(VLLM_TRIM)).encode()).hexdigest()[:16]
    target = cache / f"vllm-{VLLM_VERSION}-trimmed-{key}.tar.xz"
    if target.exists():
        return target
    with tempfile.TemporaryDirectory(dir=cache) as scratch:
        root = Path(scratch) / "tree"
        with zipfile.ZipFile(wheel) as archive:
            members = [m for m in archive.namelist() if not trimmed(m)]
            log(f"unpacking {len(members)} files of {wheel.name} without {VLLM_TRIM}")
            archive.extractall(root, members)
        tar_xz(root, target)
    return target


def site_tarball(pip_python: Path, cache: Path, pins: list[Pin], wheels: list[Path]) -> Path:
    """The wheels installed here into a --target folder for the machine, as tar.xz.

    Installing here (pip --target with the machine's platform tags, --no-deps) and
    compressing the files with xz carries about 36 MiB instead of 64 MiB of deflated wheels,
    and the machine only untars: no pip run on the GPU machine.
    """
    key = hashlib.sha256("\n".join(p.sha256 for p in pins).encode()).hexdigest()[:16]
    target = cache / f"site-{key}.tar.xz"
    if target.exists():
        return target
    with tempfile.TemporaryDirectory(dir=cache) as scratch:
        root = Path(scratch) / "site"
        run(
            pip_argv(
                pip_python,
                "install",
                "--quiet",
                "--no-index",
                "--no-deps",
                "--no-compile",
                "--target",
                str(root),
                *target_args(),
                *(str(w) for w in wheels),
            )
        )
        tar_xz(root, target)
    return target


def add_file(bundle: tarfile.TarFile, path: Path, name: str) -> None:
    info = bundle.gettarinfo(str(path), arcname=name)
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    with path.open("rb") as handle:
        bundle.addfile(info, handle)


def build_bundle(cache: Path, members: dict[str, Path]) -> Path:
    """One uncompressed tar (its members are compressed already), same bytes for same inputs."""
    key_source = "\n".join(f"{name} {path.name}" for name, path in sorted(members.items()))
    key = hashlib.sha256(key_source.encode()).hexdigest()[:16]
    target = cache / f"bundle-{key}.tar"
    if target.exists():
        return target
    for stale in cache.glob("bundle-*.tar"):  # a bundle is derived data, the largest in the cache
        stale.unlink()
    partial = target.with_name(target.name + ".partial")
    with tarfile.open(partial, "w", format=tarfile.GNU_FORMAT) as bundle:
        for name, path in sorted(members.items()):
            add_file(bundle, path, f"carry/{name}")
    partial.rename(target)
    return target


def chunks(path: Path, size: int) -> Iterator[bytes]:
    with path.open("rb") as handle:
        while chunk := handle.read(size):
            yield chunk


def write_parts(bundle: Path, out: Path) -> list[dict[str, object]]:
    """Split into out/part-NN; reuse parts whose bytes already match."""
    out.mkdir(parents=True, exist_ok=True)
    parts: list[dict[str, object]] = []
    for index, chunk in enumerate(chunks(bundle, PART_BYTES)):
        path = out / f"part-{index:02d}"
        digest = hashlib.sha256(chunk).hexdigest()
        current = path.exists() and path.stat().st_size == len(chunk)
        if not (current and sha256_file(path) == digest):
            path.write_bytes(chunk)
        parts.append({"file": path.name, "bytes": len(chunk), "sha256": digest})
    for stale in sorted(out.glob("part-*")):
        if stale.name not in {p["file"] for p in parts}:
            stale.unlink()
    return parts


def working_tree_bytes(repo: Path) -> int:
    """What travels with every call besides the carried part: tracked + untracked-not-ignored."""
    listed = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    total = 0
    for name in filter(None, listed):
        path = repo / os.fsdecode(name)
        if path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    shared = repo / "shared"
    if shared.is_dir():
        total += sum(p.stat().st_size for p in shared.rglob("*") if p.is_file())
    return total


def mib(size_bytes: int) -> str:
    return f"{size_bytes / 2**20:.1f} MiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pip-python",
        type=Path,
        required=True,
        help="python of the venv that holds a recent pip (gpu/prepare.sh makes it)",
    )
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--repo", type=Path, required=True)
    args = parser.parse_args()
    cache: Path = args.cache
    repo: Path = args.repo
    out = repo / ".carry"
    cache.mkdir(parents=True, exist_ok=True)

    skipped = image_packages() | DROPPED
    wheel = vllm_wheel(args.pip_python, cache)
    roots = root_requirements(wheel, repo, skipped)
    report = resolve(args.pip_python, cache, roots)
    pins = closure(report, roots, skipped)
    wheels = download(args.pip_python, cache, pins)
    vllm = vllm_tarball(wheel, cache)
    site = site_tarball(args.pip_python, cache, pins, wheels)
    conflicts = image_conflicts(report, pins)
    lock = cache / "lock.txt"
    lock.write_text("".join(f"{pin.name}=={pin.version}\n" for pin in pins))
    bundle = build_bundle(cache, {"lock.txt": lock, SITE_TARBALL: site, VLLM_TARBALL: vllm})
    parts = write_parts(bundle, out)
    bundle_sha256 = sha256_file(bundle)

    manifest = {
        "vllm_version": VLLM_VERSION,
        "target_python": TARGET_PYTHON,
        "bundle": BUNDLE_NAME,
        "bundle_bytes": bundle.stat().st_size,
        "bundle_sha256": bundle_sha256,
        "vllm_tarball": VLLM_TARBALL,
        "vllm_tarball_bytes": vllm.stat().st_size,
        "site_tarball": SITE_TARBALL,
        "site_tarball_bytes": site.stat().st_size,
        "vllm_trimmed": list(VLLM_TRIM),
        "dropped": sorted(DROPPED),
        "wheels": [
            {
                "name": p.name,
                "version": p.version,
                "file": p.filename,
                "bytes": w.stat().st_size,
                "sha256": p.sha256,
            }
            for p, w in zip(pins, wheels, strict=True)
        ],
        "image_conflicts": conflicts,
        "parts": parts,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    sums = [f"{p['sha256']}  {p['file']}\n" for p in parts]
    (out / "SHA256SUMS").write_text("".join(sums))

    tree_bytes = working_tree_bytes(repo)
    wheel_bytes = sum(w.stat().st_size for w in wheels)
    print(
        f"wheels:        {len(wheels)} files, {mib(wheel_bytes)}; installed + xz: {mib(site.stat().st_size)}"
    )
    print(f"vLLM trimmed:  {mib(vllm.stat().st_size)} ({vllm.name})")
    print(f"bundle:        {mib(bundle.stat().st_size)} sha256 {bundle_sha256}")
    for part in parts:
        size = int(str(part["bytes"]))
        print(f"  .carry/{part['file']}: {mib(size)}  sha256 {part['sha256']}")
    for conflict in conflicts:
        print(f"  note (--no-deps ignores it): {conflict}")
    largest = max(int(str(p["bytes"])) for p in parts)
    print(
        f"working tree that travels with each call: {mib(tree_bytes)}; "
        f"largest part + tree = {mib(largest + tree_bytes)} (limit {mib(CALL_LIMIT_BYTES)})"
    )
    if largest + tree_bytes > CALL_LIMIT_BYTES:
        print("TOO LARGE: a call would exceed 64 MiB; shrink the working tree first")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
