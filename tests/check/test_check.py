"""The incident, flag-table findings, --fix and the CLI contract."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.check import check_args
from specpilot.check.resolved import resolve
from specpilot.check.spec_check import check_spec, fix_spec
from specpilot.cli.check import check
from specpilot.engines.registry import release_tables, table_for
from specpilot.errors import UserError
from specpilot.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
HYBRID = "Qwen3_5ForConditionalGeneration"
#: the incident's second attempt, as the example spec states it (no_buffer + NEXTN + radix cache)
INCIDENT = load_spec(ROOT / "examples" / "qwen36-27b-mtp-nobuffer-sglang.toml").engine.args
INCIDENT_ERROR = (
    "Speculative decoding for Qwen3_5ForConditionalGeneration is not compatible with radix cache "
    "when using --mamba-scheduler-strategy no_buffer.To use radix cache with speculative decoding, "
    "please use --mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1."
)


def test_incident_rejected_on_0_5_13_with_flag_and_env_fix() -> None:
    result = check_args("sglang", "0.5.13", INCIDENT, {}, HYBRID)
    assert not result.ok
    errors = [f for f in result.findings if f.severity == "error"]
    assert [f.message for f in errors] == [INCIDENT_ERROR]
    assert errors[0].fix is not None
    assert errors[0].fix.args == ("--mamba-scheduler-strategy", "extra_buffer")
    assert dict(errors[0].fix.env) == {"SGLANG_ENABLE_SPEC_V2": "1"}


def test_incident_fixed_command_passes_on_0_5_13() -> None:
    fixed = fix_spec(resolve(load_spec(ROOT / "examples" / "qwen36-27b-mtp-nobuffer-sglang.toml")))
    assert fixed.result.ok
    assert fixed.env == {"SGLANG_ENABLE_SPEC_V2": "1"}
    i = fixed.args.index("--mamba-scheduler-strategy")
    assert fixed.args[i + 1] == "extra_buffer"
    assert "no_buffer" not in fixed.args


def test_old_flag_name_removed_in_0_5_23_with_replacement() -> None:
    result = check_args("sglang", "0.5.23", INCIDENT, {"SGLANG_ENABLE_SPEC_V2": "1"}, HYBRID)
    removed = next(f for f in result.findings if f.rule == "flag-removed")
    assert removed.severity == "error"
    assert "--mamba-scheduler-strategy was removed" in removed.message
    assert removed.fix is not None and removed.fix.args[0] == "--mamba-radix-cache-strategy"
    env = next(f for f in result.findings if f.rule == "env-removed")
    assert "SGLANG_ENABLE_SPEC_V2" in env.message and env.severity == "warning"


@pytest.mark.parametrize(
    ("flags", "refusal", "fix"),
    [
        (
            ["--cuda-graph-max-bs", "128"],
            "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
            "--cuda-graph-max-bs-prefill",
            ("--cuda-graph-max-bs-decode", "128"),
        ),
        (
            ["--cuda-graph-bs", "1", "2", "4"],
            "ambiguous option: --cuda-graph-bs could match --cuda-graph-bs-decode, --cuda-graph-bs-prefill",
            ("--cuda-graph-bs-decode", "1", "2", "4"),
        ),
        (
            ["--disable-piecewise-cuda-graph"],
            "unrecognized arguments: --disable-piecewise-cuda-graph",
            ("--cuda-graph-backend-prefill=disabled",),
        ),
        (
            ["--speculative-dflash-draft-window-size", "16"],
            "unrecognized arguments: --speculative-dflash-draft-window-size",
            ("--speculative-draft-window-size", "16"),
        ),
    ],
)
def test_flags_0_5_23_dropped_say_how_it_refuses_and_carry_every_value(
    flags: list[str], refusal: str, fix: tuple[str, ...]
) -> None:
    """argparse's allow_abbrev makes an old name that prefixes two new ones ambiguous; a list
    flag's values move with it (a dropped flag reads its values as the last release that had it)."""
    result = check_args("sglang", "0.5.23", ["--model-path", "m", *flags], {}, HYBRID)
    removed = next(f for f in result.findings if f.rule == "flag-removed")
    assert f"exits with '{refusal}')" in removed.message
    assert removed.fix is not None and removed.fix.args == fix


def test_old_flag_name_is_a_deprecated_alias_in_0_5_14() -> None:
    result = check_args("sglang", "0.5.14", ["--mamba-scheduler-strategy", "extra_buffer"], {}, HYBRID)
    assert result.ok
    deprecated = next(f for f in result.findings if f.rule == "flag-deprecated")
    assert deprecated.fix is not None and deprecated.fix.args == (
        "--mamba-radix-cache-strategy",
        "extra_buffer",
    )
    assert result.effective_values["mamba_radix_cache_strategy"] == "extra_buffer"


def test_fix_on_0_5_23_uses_new_flag_and_drops_removed_env() -> None:
    spec = load_spec(ROOT / "examples" / "qwen36-27b-mtp-nobuffer-sglang.toml")
    spec = spec.model_copy(
        update={
            "engine": spec.engine.model_copy(
                update={"version": "0.5.23", "env": {"SGLANG_ENABLE_SPEC_V2": "1"}}
            )
        }
    )
    assert not check_spec(spec).ok
    fixed = fix_spec(resolve(spec))
    assert fixed.result.ok
    assert "--mamba-scheduler-strategy" not in fixed.args
    assert fixed.args[fixed.args.index("--mamba-radix-cache-strategy") + 1] == "extra_buffer"
    assert fixed.env == {}


def test_mtp_is_not_an_sglang_algorithm() -> None:
    result = check_args("sglang", "0.5.23", ["--speculative-algorithm", "MTP"], {}, HYBRID)
    finding = next(f for f in result.findings if f.rule == "sglang-spec-algorithm-unknown")
    assert "NEXTN" in finding.message and "EAGLE" in finding.message
    old = check_args("sglang", "0.5.10.post1", ["--speculative-algorithm", "MTP"], {}, HYBRID)
    assert any(f.rule == "flag-invalid-choice" for f in old.findings)  # argparse choices in 0.5.10


def test_unknown_flag_and_abbreviation() -> None:
    assert check_args("sglang", "0.5.13", ["--tp", "2"], {}, None).ok  # argparse prefix of --tp-size
    result = check_args("sglang", "0.5.13", ["--no-such-flag", "3"], {}, None)
    assert [f.rule for f in result.findings if f.severity == "error"] == ["flag-unknown"]


def test_effective_args_show_engine_adjustments() -> None:
    result = check_args(
        "sglang", "0.5.13", ["--speculative-algorithm", "NEXTN", "--disable-radix-cache"], {}, HYBRID
    )
    assert result.ok
    args = result.effective_args
    assert args[args.index("--speculative-algorithm") + 1] == "EAGLE"
    assert args[args.index("--max-running-requests") + 1] == "48"


def test_tables_cover_supported_releases() -> None:
    versions = [str(t.version) for t in release_tables("sglang")]
    assert versions == ["0.5.10.post1", "0.5.11", "0.5.12", "0.5.13.post1", "0.5.14", "0.5.19", "0.5.23"]
    from packaging.version import Version

    assert str(table_for("sglang", Version("0.5.13")).version) == "0.5.13.post1"


def test_cli_json_contract_and_exit_codes() -> None:
    runner = CliRunner()
    spec_path = str(ROOT / "examples" / "qwen36-27b-mtp-nobuffer-sglang.toml")
    out = runner.invoke(check, [spec_path, "--json"])
    assert out.exit_code == 1
    payload = json.loads(out.output)
    assert payload["ok"] is False
    assert {"rule", "severity", "message", "fix"} <= set(payload["findings"][0])
    assert isinstance(payload["effective_args"], list)
    fixed = runner.invoke(check, [spec_path, "--json", "--fix"])
    # --fix prints the fix; the exit code stays the verdict on the flags given
    assert fixed.exit_code == 1
    assert json.loads(fixed.output)["fixed"]["env"] == {"SGLANG_ENABLE_SPEC_V2": "1"}
    assert json.loads(fixed.output)["fixed"]["ok"] is True


@pytest.mark.parametrize("version", ["0.5.13", "0.5.23"])
def test_cli_pasted_command(version: str) -> None:
    model = str(ROOT / "examples" / "models" / "qwen3.6-27b")
    argv = [
        "--engine-version",
        version,
        "--fix",
        "--",
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        model,
        "--speculative-algorithm",
        "NEXTN",
        "--mamba-scheduler-strategy",
        "no_buffer",
    ]
    out = CliRunner().invoke(check, argv)
    assert out.exit_code == 1, out.output
    assert "rejected" in out.output and "fixed command (passes)" in out.output


def test_cli_bad_input_is_a_user_error() -> None:
    from specpilot.errors import EXIT_BAD_INPUT, UserError

    out = CliRunner().invoke(check, ["missing.toml"])
    # the `specpilot` group maps UserError to exit code 2
    assert isinstance(out.exception, UserError)
    assert out.exception.exit_code == EXIT_BAD_INPUT


def test_fix_write_makes_a_spec_that_passes(tmp_path: Path) -> None:
    runner = CliRunner()
    new_spec = tmp_path / "sub" / "fixed.toml"
    new_spec.parent.mkdir()
    spec_path = str(ROOT / "examples" / "qwen36-27b-mtp-nobuffer-sglang.toml")
    out = runner.invoke(check, ["--fix", "--write", str(new_spec), spec_path])
    assert out.exit_code == 1, out.output
    assert f"corrected spec written to {new_spec}" in out.output
    written = load_spec(new_spec)
    assert written.engine.env == {"SGLANG_ENABLE_SPEC_V2": "1"}
    assert "extra_buffer" in written.engine.args and "no_buffer" not in written.engine.args
    # the relative model path still names the example's model folder from the new location
    assert written.model_dir().resolve() == (ROOT / "examples" / "models" / "qwen3.6-27b").resolve()
    again = runner.invoke(check, [str(new_spec)])
    assert again.exit_code == 0, again.output
    # never overwrites
    refused = runner.invoke(check, ["--fix", "--write", str(new_spec), spec_path])
    assert isinstance(refused.exception, UserError) and refused.exception.exit_code == 2
    assert "never overwrites" in str(refused.exception)


def test_a_rule_that_raises_is_a_rule_error_finding_not_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    from specpilot.engines import registry
    from specpilot.engines.rules import Rule, versions

    def broken(ctx: object) -> bool:
        raise TypeError("'<' not supported between instances of 'NoneType' and 'int'")

    rule = Rule("sglang-broken-example", "sglang", versions(">=0.5.10"), "error", broken, "never shown")
    sglang, *others = registry.ENGINES
    monkeypatch.setattr(
        registry, "ENGINES", (dataclasses.replace(sglang, rules=(*sglang.rules, rule)), *others)
    )
    result = check_args("sglang", "0.5.13", ["--model-path", "m"], {}, HYBRID)
    assert not result.ok
    [finding] = [f for f in result.findings if f.rule == "rule-error"]
    assert finding.severity == "error"
    assert "sglang-broken-example" in finding.message
    assert "TypeError: '<' not supported" in finding.message
