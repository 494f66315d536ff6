"""The one argv reader decides what the engines' argparse decides, for every consumer."""

from __future__ import annotations

import json

import pytest
from packaging.version import Version

from specpilot.check import check_args
from specpilot.engines.argv import read_argv
from specpilot.engines.fix import Fix
from specpilot.engines.flags import ReleaseTable
from specpilot.engines.registry import table_for

SGLANG = table_for("sglang", Version("0.5.13.post1"))
VLLM = table_for("vllm", Version("0.32.0"))


def test_values_spellings_and_positional() -> None:
    read = read_argv(SGLANG, ["--tp", "2", "--mem-fraction-static=0.85", "--disable-radix-cache", "extra"])
    assert [(u.spelling, u.values) for u in read.uses] == [
        ("--tp-size", ("2",)),  # a unique prefix is the flag (allow_abbrev)
        ("--mem-fraction-static", ("0.85",)),
        ("--disable-radix-cache", ()),
    ]
    assert read.positional == ("extra",)


def test_a_negative_number_is_a_value_not_an_option() -> None:
    read = read_argv(SGLANG, ["--max-running-requests", "-1", "--page-size", "16"])
    assert [(u.spelling, u.values) for u in read.uses] == [
        ("--max-running-requests", ("-1",)),
        ("--page-size", ("16",)),
    ]


def test_a_flag_followed_by_an_option_has_no_value() -> None:
    read = read_argv(SGLANG, ["--port", "--host", "0.0.0.0"])
    assert read.uses[0].missing_value
    assert read.uses[1].values == ("0.0.0.0",)


@pytest.mark.parametrize(
    ("table", "typed", "resolved"),
    [(VLLM, "--max_num_seqs", "--max-num-seqs"), (SGLANG, "--mem_fraction_static", None)],
)
def test_underscore_spellings_only_where_the_parser_rewrites_them(
    table: ReleaseTable, typed: str, resolved: str | None
) -> None:
    use = read_argv(table, [typed, "8"]).uses[0]
    assert (use.flag.name if use.flag else None) == resolved


def test_vllm_negation_and_list_values() -> None:
    read = read_argv(VLLM, ["--no-enable-prefix-caching", "--served-model-name", "a", "b", "-tp", "2"])
    negation, names, tp = read.uses
    assert negation.negated and negation.flag is not None and negation.flag.dest == "enable_prefix_caching"
    assert names.values == ("a", "b")
    assert tp.flag is not None and tp.flag.dest == "tensor_parallel_size" and tp.values == ("2",)


def test_an_ambiguous_prefix_is_unknown() -> None:
    assert read_argv(SGLANG, ["--max-lo", "2"]).uses[0].flag is None  # --max-loaded-loras, --max-lora-...


def test_without_drops_a_flag_with_its_values() -> None:
    read = read_argv(SGLANG, ["--tp", "2", "--speculative-algorithm=EAGLE", "--disable-radix-cache"])
    assert read.without(lambda u: u.spelling.startswith("--speculative")) == [
        "--tp",
        "2",
        "--disable-radix-cache",
    ]


def test_fix_apply_replaces_every_spelling_of_the_same_flag() -> None:
    argv = ["--mem-frac", "0.9", "--mem-fraction-static=0.95", "--tp-size", "1"]
    new_argv, env = Fix(args=("--mem-fraction-static", "0.8")).apply(SGLANG, argv, {})
    assert new_argv == ["--tp-size", "1", "--mem-fraction-static", "0.8"]
    assert env == {}


def test_fix_apply_removes_flags_and_env() -> None:
    fix = Fix(
        remove_args=("--mamba-scheduler-strategy",), remove_env=("SGLANG_ENABLE_SPEC_V2",), env={"A": "1"}
    )
    argv, env = fix.apply(SGLANG, ["--mamba-sched", "no_buffer", "--tp", "1"], {"SGLANG_ENABLE_SPEC_V2": "1"})
    assert argv == ["--tp", "1"]
    assert env == {"A": "1"}


def test_fix_describe_says_every_part() -> None:
    fix = Fix(args=("--a", "1"), env={"X": "2"}, remove_args=("--b",), remove_env=("Y",), text="why")
    assert fix.describe() == "--a 1 in place of --b; X=2; drop Y; why"
    assert Fix(remove_args=("--b",)).describe() == "drop --b"  # gone for good: the only "drop"


def test_check_keeps_an_abbreviated_flag_in_the_effective_args() -> None:
    """It was dropped from `effective args` (an argv walker without abbreviations)."""
    result = check_args("sglang", "0.5.13.post1", ["--tp", "1", "--page-size", "16"])
    assert result.effective_args[:4] == ["--tp", "1", "--page-size", "16"]


def test_sglang_refuses_underscore_spellings_like_its_argparse() -> None:
    result = check_args("sglang", "0.5.13.post1", ["--mem_fraction_static", "0.8"])
    assert not result.ok
    assert any(f.rule == "flag-unknown" and "--mem_fraction_static" in f.message for f in result.findings)


def test_vllm_reads_underscore_spellings_like_its_parser() -> None:
    result = check_args("vllm", "0.32.0", ["--max_num_seqs", "8"])
    assert result.ok
    assert result.effective_values["max_num_seqs"] == 8


def test_a_negative_value_is_checked_as_a_value() -> None:
    result = check_args("sglang", "0.5.13.post1", ["--max-running-requests", "-1"])
    assert any(f.rule == "flag-out-of-range" for f in result.findings)
    assert not any(f.rule == "flag-missing-value" for f in result.findings)


@pytest.mark.parametrize("argv", [["-O3"], ["-O=3"], ["-O", "3"], ["--optimization-level", "3"]])
def test_vllm_optimization_level_spellings(argv: list[str]) -> None:
    [use] = read_argv(VLLM, argv).uses
    assert use.spelling == "--optimization-level" and use.values == ("3",)
    result = check_args("vllm", "0.32.0", argv)
    assert result.ok and result.effective_values["optimization_level"] == "3"


def test_vllm_dotted_keys_set_one_key_of_a_json_flag() -> None:
    argv = [
        "--speculative-config.method",
        "mtp",
        "--speculative_config.num_speculative_tokens=2",
        "--port",
        "8000",
    ]
    read = read_argv(VLLM, argv)
    assert [(u.spelling, u.key_path, u.values) for u in read.uses[:2]] == [
        ("--speculative-config", ("method",), ("mtp",)),
        ("--speculative-config", ("num_speculative_tokens",), ("2",)),
    ]
    result = check_args("vllm", "0.32.0", argv)
    assert json.loads(str(result.effective_values["speculative_config"])) == {
        "method": "mtp",
        "num_speculative_tokens": 2,
    }
    assert not any(f.rule == "flag-unknown" for f in result.findings)


def test_sglang_has_no_dotted_keys() -> None:
    result = check_args("sglang", "0.5.13.post1", ["--speculative-algorithm.x", "1"])
    assert any(f.rule == "flag-unknown" for f in result.findings)
