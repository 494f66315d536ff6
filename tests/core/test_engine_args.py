"""Engine flags parse the way the engine's argparse parses them."""

from __future__ import annotations

import pytest

from specpilot.engines.args import flag_table, parse_engine_args
from specpilot.errors import UserError


def test_values_are_typed_and_aliases_resolve() -> None:
    args = parse_engine_args(
        "sglang",
        "0.5.13",
        [
            "--tp",
            "2",
            "--mem-fraction-static=0.85",
            "--disable-radix-cache",
            "--speculative-algorithm",
            "NEXTN",
        ],
    )
    assert args.values == {
        "tp_size": 2,
        "mem_fraction_static": 0.85,
        "disable_radix_cache": True,
        "speculative_algorithm": "NEXTN",
    }
    assert args.spelled["tp_size"] == "--tp"
    assert args.get_int("tp_size") == 2
    assert not args.given("max_running_requests")


def test_vllm_negation_json_and_lists() -> None:
    args = parse_engine_args(
        "vllm",
        "0.26.0",
        [
            "--no-enable-prefix-caching",
            "--speculative-config",
            '{"method": "mtp", "num_speculative_tokens": 3}',
            "--served-model-name",
            "a",
            "b",
            "-tp",
            "2",
        ],
    )
    assert args.values["enable_prefix_caching"] is False
    assert args.values["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 3}
    assert args.values["served_model_name"] == ["a", "b"]
    assert args.values["tensor_parallel_size"] == 2


def test_unknown_flags_are_kept_not_fatal() -> None:
    args = parse_engine_args("sglang", "0.5.13", ["--frobnicate", "7", "--tp", "1", "--shiny"])
    assert args.unknown == ["--frobnicate", "7", "--shiny"]
    assert args.values == {"tp_size": 1}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tp", "two"], "--tp takes an integer"),
        (["--mem-fraction-static"], "needs a value"),
        (["--speculative-config", "{bad"], "takes JSON"),
    ],
)
def test_bad_values(argv: list[str], message: str) -> None:
    engine = "vllm" if "--speculative-config" in argv else "sglang"
    with pytest.raises(UserError, match=message):
        parse_engine_args(engine, "0.26.0" if engine == "vllm" else "0.5.13", argv)


def test_unknown_engine() -> None:
    with pytest.raises(UserError, match="unknown engine"):
        flag_table("tgi", "1.0")


@pytest.mark.parametrize("version", ["0.5.10.post1", "0.5.13.post1", "0.5.14", "0.5.23"])
@pytest.mark.parametrize("spelling", ["--tp", "--tp-size", "--tensor-parallel-size"])
def test_sglang_tp_reaches_the_field_the_server_reads(version: str, spelling: str) -> None:
    """Up to 0.5.13 argparse stores --tp-size under `tensor_parallel_size` and ServerArgs renames
    it to `tp_size`; the planner reads `tp_size` on every release, `--tp` by argparse prefix."""
    args = parse_engine_args("sglang", version, [spelling, "4"])
    assert args.get_int("tp_size") == 4
