"""The reasoning-parser warning: the parser named per engine and release, and what `up` starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from specpilot.check import check_args
from specpilot.check.resolved import resolve
from specpilot.engines.reasoning import QWEN3_ARCHS, REASONING_PARSERS, reasoning_parser_for
from specpilot.engines.registry import engine_release, release_tables
from specpilot.launch.command import plan_argv
from specpilot.launch.preflight import launch_spec, run_preflight
from specpilot.spec import load_spec

EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.mark.parametrize("table", release_tables("sglang"), ids=lambda t: str(t.version))
def test_the_sglang_parser_is_one_each_release_accepts(table: object) -> None:
    version = table.version  # type: ignore[attr-defined]
    flag = table.by_dest["reasoning_parser"]  # type: ignore[attr-defined]
    for arch in QWEN3_ARCHS:
        parser = reasoning_parser_for("sglang", version, arch)
        assert parser is not None and parser.name in (flag.choices or ())


def test_every_parser_names_an_engine_release_range_it_applies_to() -> None:
    for parser in REASONING_PARSERS:
        tables = release_tables(parser.engine)
        assert any(parser.versions.contains(t.version, prereleases=True) for t in tables)


def test_a_thinking_model_without_a_parser_is_warned_with_the_fix() -> None:
    result = check_args("sglang", "0.5.23", [], {}, "Qwen3_5ForConditionalGeneration")
    (finding,) = [f for f in result.findings if f.rule == "sglang-reasoning-parser-missing"]
    assert result.ok and finding.severity == "warning" and finding.up_applies
    assert "inline in content" in finding.message
    assert finding.fix is not None and finding.fix.args == ("--reasoning-parser", "qwen3")


def test_a_model_that_does_not_think_is_not_warned() -> None:
    result = check_args("sglang", "0.5.23", [], {}, "LlamaForCausalLM")
    assert "sglang-reasoning-parser-missing" not in {f.rule for f in result.findings}


def _without_parser(name: str, tmp_path: Path) -> Path:
    lines = (EXAMPLES / name).read_text().splitlines()
    text = "\n".join(line for line in lines if "--reasoning-parser" not in line)
    (tmp_path / "models").symlink_to(EXAMPLES / "models")  # the model's config, read beside the spec
    spec = tmp_path / name
    spec.write_text(text)
    return spec


def test_up_adds_the_parser_to_the_argv_it_starts(tmp_path: Path) -> None:
    spec = load_spec(_without_parser("qwen36-27b-mtp-sglang-fixed.toml", tmp_path))
    assert "--reasoning-parser" not in spec.engine.args
    pre = run_preflight(resolve(spec))
    assert [args for args, _ in pre.added] == [("--reasoning-parser", "qwen3")]
    assert not any("reasoning-parser" in w for w in pre.warnings)  # added, not left to the user
    launched = launch_spec(spec, pre)
    argv, _ = plan_argv(
        launched, engine_release(launched.engine.name, launched.engine.version), model_path="/m"
    )
    assert argv[argv.index("--reasoning-parser") + 1] == "qwen3"


def test_up_keeps_the_parser_the_user_set(tmp_path: Path) -> None:
    spec = load_spec(EXAMPLES / "qwen36-27b-mtp-sglang-fixed.toml")
    pre = run_preflight(resolve(spec))
    assert pre.added == [] and launch_spec(spec, pre) == spec
    launched = launch_spec(spec, pre)
    argv, _ = plan_argv(
        launched, engine_release(launched.engine.name, launched.engine.version), model_path="/m"
    )
    assert argv.count("--reasoning-parser") == 1
