"""A Unicode digit ("²", "٣") passes str.isdigit() and then int() refuses it: every place that
reads a count from text checks for ASCII digits, so such a value is refused or ignored, never
"unexpected ValueError"."""

from __future__ import annotations

import pytest

from specpilot.cmdline import parse_launch_command
from specpilot.errors import UserError
from specpilot.hosts.errors import BadTarget
from specpilot.hosts.target import parse_target

DIGITS = ["²", "٣", "๓"]


@pytest.mark.parametrize("digit", DIGITS)
def test_a_port_of_unicode_digits_is_refused(digit: str) -> None:
    with pytest.raises(BadTarget, match="is not a number from 1 to 65535"):
        parse_target(f"ssh://user@host:{digit}")


@pytest.mark.parametrize("digit", DIGITS)
def test_a_pasted_parallel_size_of_unicode_digits_is_no_gpu_count(digit: str) -> None:
    pasted = parse_launch_command(
        ["python", "-m", "sglang.launch_server", "--model-path", "/m", "--tp", digit]
    )
    assert pasted.gpu_count == 1  # the flag's own error is check's to name


@pytest.mark.parametrize("digit", DIGITS)
def test_a_cpu_kv_space_of_unicode_digits_is_refused(digit: str) -> None:
    from specpilot.engines.vllm.releases import CpuBackend
    from specpilot.plan.vllm.cpu import cpu_kv_cache_bytes

    backend = CpuBackend()

    with pytest.raises(UserError, match="is not a whole number of GiB"):
        cpu_kv_cache_bytes({backend.kv_space_env: digit}, None, 2**34, 0.9, 2**30, backend)


@pytest.mark.parametrize("digit", DIGITS)
def test_sglang_draft_steps_of_unicode_digits_are_no_count(digit: str) -> None:
    from specpilot.engines.argv import read_argv
    from specpilot.engines.registry import engine_release

    release = engine_release("sglang", "0.5.13")
    read = read_argv(release.table, ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", digit])
    assert release.engine.draft.draft_tokens_of(read) == 0  # left to the engine: check names the flag
