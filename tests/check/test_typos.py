"""A mistyped flag is renamed, never dropped; `--fix` never deletes a flag that carries intent.

The incident's failure was a server running other flags than intended. A fix that "repairs"
`--speculative-algoritm NEXTN` by deleting it does the same: the server starts, without MTP.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from specpilot.check import check_args
from specpilot.check.fix import fix_launch
from specpilot.check.intent import intent_of_name, intent_of_option
from specpilot.check.parse import nearest_flags, parse_argv
from specpilot.cli.check import check
from specpilot.engines.argv import read_argv
from specpilot.engines.flags import FlagInfo, ReleaseTable
from specpilot.engines.registry import engine_release, release_tables
from specpilot.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
MODEL = str(ROOT / "examples" / "models" / "qwen3.6-27b")
HYBRID = "Qwen3_5ForConditionalGeneration"
TABLES = [(engine, table) for engine in ("sglang", "vllm") for table in release_tables(engine)]


def one_letter_typos(name: str) -> Iterator[str]:
    """Every one-letter slip of a `--flag-name`: a letter left out, doubled, swapped with its
    neighbour, or replaced by the key next to it."""
    body = name[2:]
    for i in range(len(body)):
        yield "--" + body[:i] + body[i + 1 :]
        yield "--" + body[:i] + body[i] + body[i:]
        if i + 1 < len(body):
            yield "--" + body[:i] + body[i + 1] + body[i] + body[i + 2 :]
        yield "--" + body[:i] + ("x" if body[i] != "x" else "z") + body[i + 1 :]


def unknown_typos(table: ReleaseTable, flag: FlagInfo) -> list[str]:
    """The typos of `flag` this release refuses (not another flag, not a unique prefix)."""
    return [
        t for t in dict.fromkeys(one_letter_typos(flag.name)) if read_argv(table, [t]).uses[0].flag is None
    ]


def speculative_flags(table: ReleaseTable) -> list[FlagInfo]:
    return [f for f in table.flags if intent_of_name(f.dest) == "speculation" and f.name.startswith("--")]


@pytest.mark.parametrize(("engine", "table"), TABLES, ids=[f"{e}-{t.version}" for e, t in TABLES])
def test_one_letter_typos_of_speculative_flags_get_the_right_suggestion(
    engine: str, table: ReleaseTable
) -> None:
    release = engine_release(engine, str(table.version))
    flags = speculative_flags(table)
    assert flags, "every release has speculative flags"
    checked = 0
    for flag in flags:
        for typo in unknown_typos(table, flag):
            value = () if flag.kind == "bool" else ("4",)
            [finding] = [f for f in parse_argv(release, [typo, *value]).findings if f.rule == "flag-unknown"]
            assert flag.name in finding.message, (typo, finding.message)
            assert finding.fix is not None
            assert "drop --" not in finding.fix.describe(), (typo, finding.fix.describe())
            if finding.fix.args:  # the nearest flag was unique: it is this one, with the value kept
                assert finding.fix.args == (flag.name, *value), typo
            checked += 1
    assert checked > 10 * len(flags)


@pytest.mark.parametrize(("engine", "table"), TABLES, ids=[f"{e}-{t.version}" for e, t in TABLES])
def test_no_flag_of_any_table_is_dropped_for_a_letter_left_out(engine: str, table: ReleaseTable) -> None:
    """Every flag of every table, a letter left out in the middle of its name: the finding names
    the flag and its fix is a rename (or a choice), never "drop"."""
    release = engine_release(engine, str(table.version))
    for flag in table.flags:
        if not flag.name.startswith("--") or len(flag.name) < 6:
            continue
        middle = len(flag.name) // 2
        typo = flag.name[:middle] + flag.name[middle + 1 :]
        if read_argv(table, [typo]).uses[0].flag is not None:
            continue
        [finding] = [f for f in parse_argv(release, [typo]).findings if f.rule == "flag-unknown"]
        assert flag.name in finding.message, (typo, finding.message)
        assert finding.fix is not None and "drop --" not in finding.fix.describe(), typo


def test_a_name_out_of_reach_is_still_dropped() -> None:
    """Nothing near it: the flag is not a typo of a real one, and the engine would refuse it."""
    result = check_args("sglang", "0.5.13", ["--totally-new", "3"])
    [finding] = [f for f in result.findings if f.rule == "flag-unknown"]
    assert finding.fix is not None and finding.fix.remove_args == ("--totally-new",)
    assert "did you mean" not in finding.message


def test_the_suggestion_says_what_the_flag_takes() -> None:
    result = check_args("sglang", "0.5.13", ["--mamba-scheduler-stratgy", "extra_buffer"])
    [finding] = [f for f in result.findings if f.rule == "flag-unknown"]
    assert "did you mean --mamba-scheduler-strategy (text, one of auto, no_buffer, extra_buffer" in (
        finding.message
    )


def intent_flags(table: ReleaseTable, argv: list[str]) -> dict[str, int]:
    """How many distinct flags of each intent an argv gives (a typo counted as the flag it is near)."""
    flags: dict[str, set[str]] = {}
    for use in read_argv(table, argv).uses:
        kind = intent_of_option(table, use.typed)
        near = nearest_flags(table, use.typed) if use.flag is None else [use.flag]
        if kind is not None:
            flags.setdefault(kind, set()).add(near[0].dest if len(near) == 1 else use.typed)
    return {kind: len(names) for kind, names in flags.items()}


INCIDENT = load_spec(ROOT / "examples" / "qwen36-27b-mtp-nobuffer-sglang.toml").engine.args
#: launches whose fixes would delete what the user asked for: typos, values out of range, a flag
#: the release removed without a successor
LAUNCHES: tuple[tuple[str, list[str]], ...] = (
    ("0.5.13", INCIDENT),
    ("0.5.13", [a.replace("--speculative-algorithm", "--speculative-algoritm") for a in INCIDENT]),
    ("0.5.13", [a.replace("--speculative-num-steps", "--speculative-num-step5") for a in INCIDENT]),
    ("0.5.13", [*INCIDENT, "--mem-fraction-static", "1.5"]),
    ("0.5.13", [*INCIDENT, "--mem-fractoin-static", "0.8"]),
    ("0.5.13", ["--speculative-algorithm", "NEXTN", "--mamba-schedular-strategy", "no_buffer"]),
    ("0.5.23", INCIDENT),
    ("0.5.23", ["--speculative-algorithm", "DSPARK", "--speculative-num-draft-tokens", "1"]),
)


@pytest.mark.parametrize(("version", "argv"), LAUNCHES)
def test_fix_never_leaves_less_speculation_memory_parallelism_or_model(version: str, argv: list[str]) -> None:
    table = engine_release("sglang", version).table
    fixed = fix_launch(
        lambda a, e: check_args("sglang", version, a, e, HYBRID), "sglang", table.version, argv, {}
    )
    before, after = intent_flags(table, argv), intent_flags(table, fixed.args)
    for kind, count in before.items():
        assert after.get(kind, 0) >= count, (kind, argv, fixed.args, fixed.refused)


def test_fix_refuses_to_drop_a_memory_flag_and_names_it() -> None:
    argv = [*INCIDENT, "--mem-fraction-static", "1.5"]
    version = engine_release("sglang", "0.5.13").table.version
    fixed = fix_launch(lambda a, e: check_args("sglang", "0.5.13", a, e, HYBRID), "sglang", version, argv, {})
    assert not fixed.result.ok
    assert fixed.refused == [
        "flag-out-of-range: would drop --mem-fraction-static (memory); not done: change it yourself"
    ]
    assert "1.5" in fixed.args


def _spec_with(tmp_path: Path, args: list[str]) -> Path:
    spec = tmp_path / "typo.toml"
    spec.write_text(
        f'name = "typo"\n[model]\npath = "{MODEL}"\n[gpu]\nmemory_gib = 95.6\n'
        f'[engine]\nname = "sglang"\nversion = "0.5.13"\nargs = {json.dumps(args)}\n'
        'env = { SGLANG_ENABLE_SPEC_V2 = "1" }\n'
    )
    return spec


def test_check_fix_write_keeps_a_mistyped_speculative_flag(tmp_path: Path) -> None:
    """The new user's hour: `--speculative-algoritm NEXTN` was "fixed" by deleting it, and the
    written spec planned as fitting, with no speculation at all."""
    typo = [a.replace("--speculative-algorithm", "--speculative-algoritm") for a in INCIDENT]
    out = CliRunner().invoke(
        check, ["--fix", "--write", str(tmp_path / "fixed.toml"), str(_spec_with(tmp_path, typo))]
    )
    assert out.exit_code == 1, out.output
    assert "did you mean --speculative-algorithm" in out.output
    assert "fix: --speculative-algorithm NEXTN in place of --speculative-algoritm" in out.output
    written = load_spec(tmp_path / "fixed.toml").engine.args
    assert written[written.index("--speculative-algorithm") + 1] == "NEXTN"
    assert "--speculative-algoritm" not in written


def test_check_fix_write_writes_nothing_it_would_have_to_drop(tmp_path: Path) -> None:
    argv = [*INCIDENT, "--mem-fraction-static", "1.5"]
    target = tmp_path / "fixed.toml"
    out = CliRunner().invoke(check, ["--fix", "--write", str(target), str(_spec_with(tmp_path, argv))])
    assert out.exit_code == 1, out.output
    assert "not fixed: flag-out-of-range: would drop --mem-fraction-static (memory)" in out.output
    assert f"nothing written to {target}" in out.output
    assert not target.exists()


INCIDENT_PASTED = [
    "--engine-version",
    "0.5.13",
    "--",
    "SGLANG_ENABLE_SPEC_V2=1",
    "python",
    "-m",
    "sglang.launch_server",
    "--model-path",
    "M",
    "--speculative-algorithm",
    "NEXTN",
    "--mamba-scheduler-strategy",
    "no_buffer",
]


def test_check_without_the_model_is_not_accepted() -> None:
    """`check --help`'s own example on a laptop: the incident's refused flags, no model there."""
    out = CliRunner().invoke(check, INCIDENT_PASTED)
    assert out.exit_code == 2, out.output
    first = out.output.splitlines()[0]
    assert first.startswith("sglang 0.5.13: checked without the model: ")
    skipped = int(first.split(": ")[2].split()[0])
    assert skipped >= 5 and "accepted" not in first


def test_check_without_the_model_counts_the_rules_that_ask_it() -> None:
    as_json = json.loads(CliRunner().invoke(check, ["--json", *INCIDENT_PASTED]).output)
    assert as_json["model_read"] is False
    with_model = check_args("sglang", "0.5.13", INCIDENT, {"SGLANG_ENABLE_SPEC_V2": "1"}, HYBRID)
    assert "sglang-mamba-no-buffer-spec-radix" in with_model.model_rules
    assert as_json["model_rules_not_run"] > 0
    assert (
        as_json["verdict"]
        == f"checked without the model: {as_json['model_rules_not_run']} model rules not run"
    )


def test_no_model_accepts_a_check_without_the_model() -> None:
    out = CliRunner().invoke(check, ["--no-model", *INCIDENT_PASTED])
    assert out.exit_code == 0, out.output
    assert "accepted without the model (" in out.output.splitlines()[0]


def test_a_readable_model_is_accepted_as_before() -> None:
    argv = [a if a != "M" else MODEL for a in INCIDENT_PASTED]
    argv = [a if a != "no_buffer" else "extra_buffer" for a in argv]
    out = CliRunner().invoke(check, argv)
    assert out.exit_code == 0, out.output
    assert out.output.splitlines()[0] == "sglang 0.5.13: accepted"
