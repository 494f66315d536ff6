"""The spec file: valid specs load, every mistake is one line naming the key and the fix."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from specpilot.errors import UserError
from specpilot.spec import load_spec, parse_spec, spec_to_toml

GOOD = """
name = "qwen36-mtp"
[model]
path = "models/qwen3.6-27b"
[gpu]
memory_gib = 95.6
[engine]
name = "sglang"
version = "0.5.13"
args = ["--tp", "1", "--mem-fraction-static", "0.92"]
env = { SGLANG_ENABLE_SPEC_V2 = "1" }
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(text)
    return path


def test_good_spec_loads_with_defaults(tmp_path: Path) -> None:
    (tmp_path / "models/qwen3.6-27b").mkdir(parents=True)
    spec = load_spec(write(tmp_path, GOOD))
    assert spec.engine.env == {"SGLANG_ENABLE_SPEC_V2": "1"}
    assert spec.server.port == 30000
    assert spec.host.target == "local"
    assert spec.model_dir() == tmp_path / "models/qwen3.6-27b"


def test_toml_round_trip(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, GOOD))
    again = load_spec(write(tmp_path, spec_to_toml(spec)))
    assert again.model_dump() == spec.model_dump()


@pytest.mark.parametrize(
    ("mutation", "expected"),
    [
        (
            ("[gpu]\nmemory_gib = 95.6", "[gpu]\nmemory_gb = 95.6"),
            "[gpu] memory_gb: unknown key (did you mean 'memory_gib'?)",
        ),
        (("[gpu]\nmemory_gib = 95.6", "[gpu]\nmemory_gib = -1"), "[gpu] memory_gib"),
        (('name = "sglang"', 'name = "tgi"'), "[engine] name"),
        (('version = "0.5.13"', 'version = "latest"'), "not a release number"),
        (('name = "qwen36-mtp"\n', ""), "name: missing required key"),
        (('args = ["--tp"', 'args = ["--model-path", "/x", "--tp"'), "names the model"),
    ],
)
def test_mistakes_name_the_key(tmp_path: Path, mutation: tuple[str, str], expected: str) -> None:
    old, new = mutation
    assert old in GOOD
    with pytest.raises(UserError) as err:
        load_spec(write(tmp_path, GOOD.replace(old, new)))
    assert expected in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_file_and_bad_toml(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such file"):
        load_spec(tmp_path / "nope.toml")
    with pytest.raises(UserError, match="not valid TOML"):
        load_spec(write(tmp_path, "name = "))


def test_unknown_top_level_key_suggests_section() -> None:
    with pytest.raises(UserError, match="did you mean 'engine'"):
        parse_spec({"name": "x", "engin": {}, "model": {"path": "m"}, "gpu": {"memory_gib": 1}})


def test_hub_id_without_local_copy_says_how_to_get_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from specpilot.models.host_files import read_spec_model_files

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    spec = load_spec(write(tmp_path, GOOD.replace("models/qwen3.6-27b", "Qwen/Qwen3-8B")))
    with pytest.raises(UserError, match="huggingface-cli download Qwen/Qwen3-8B"):
        asyncio.run(read_spec_model_files(spec))


@pytest.mark.parametrize(
    ("value", "said"),
    [(1, "a whole number"), (1.5, "a number"), (True, "a boolean"), ([1], "an array"), ({"a": 1}, "a table")],
)
def test_an_env_value_of_another_type_is_said_in_words(value: object, said: str) -> None:
    """The refusal read "got a int" (Python's type names); the value itself stays unshown."""
    with pytest.raises(UserError) as err:
        parse_spec(
            {
                "name": "x",
                "engine": {"name": "sglang", "version": "0.5.13", "env": {"A": value}},
                "model": {"path": "m"},
                "gpu": {"memory_gib": 1},
            }
        )
    assert f"(got {said}; the value is not shown" in str(err.value), err.value
