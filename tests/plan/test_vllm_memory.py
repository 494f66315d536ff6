"""Each quantity of vLLM's memory arithmetic on its own: values vLLM printed (the H200 matrix,
published logs) and how each quantity moves with its inputs. Plan-wide properties (the
budget adds up, the pool is whole blocks, monotone in the utilization) are in
test_plan_properties.py."""

from __future__ import annotations

import pytest

from specpilot.engines.vllm.releases import vllm_line
from specpilot.errors import UserError
from specpilot.models.layers import GatedDeltaNetSpec
from specpilot.plan.types import GIB
from specpilot.plan.vllm import quantities as mem
from specpilot.plan.vllm.allocation import VllmInputs, allocate


def test_requested_memory_rounds_up() -> None:
    assert mem.requested_memory_bytes(1000, 0.9) == 900
    assert mem.requested_memory_bytes(1001, 0.9) == 901  # ceil(900.9)


#: Qwen3.6-27B on one GPU: 4 KV heads of 256 at bf16 per attention layer and token
QWEN36_ATTENTION_BYTES = 4096
#: its Gated-DeltaNet layer: 16 key heads, 48 value heads of 128, conv kernel 4
QWEN36_GDN = GatedDeltaNetSpec(16, 48, 128, 128, 4)


def _qwen36_state(num_speculative_tokens: int) -> int:
    # conv at bf16 (the model dtype), SSM at float32 (the config's mamba_ssm_dtype)
    conv = QWEN36_GDN.conv_state_bytes(1, 2, extra_positions=num_speculative_tokens)
    return conv + QWEN36_GDN.ssm_state_bytes(1, 4)


@pytest.mark.parametrize(
    ("num_speculative_tokens", "block_tokens", "padding_percent"), [(0, 784, 0.13), (3, 800, 0.25)]
)
def test_gdn_state_of_qwen36_27b_is_what_vllm_printed(
    num_speculative_tokens: int, block_tokens: int, padding_percent: float
) -> None:
    """The H200 matrix (tests/data/startup_logs/vllm/h200-hybrid*.log) printed "Setting
    attention block size to N tokens" and "Padding mamba page size by P%": the attention page
    of N tokens is the state rounded up, the padding is the difference."""
    state = _qwen36_state(num_speculative_tokens)
    assert mem.hybrid_attention_block_size_tokens(state, QWEN36_ATTENTION_BYTES) == block_tokens
    page = block_tokens * QWEN36_ATTENTION_BYTES
    assert round(100 * (page - state) / state, 2) == padding_percent


def test_each_speculative_token_widens_the_conv_window_by_one_column() -> None:
    conv = [QWEN36_GDN.conv_state_bytes(1, 2, extra_positions=n) for n in range(4)]
    columns = 4 - 1  # kernel - 1 without speculation
    assert [c * columns // conv[0] for c in conv] == [3, 4, 5, 6]


def test_hybrid_block_size_covers_the_mamba_page() -> None:
    # Qwen3.6-27B TP1 bf16 KV: 3,207,168-byte state, 4096 B/token -> 49 x 16 tokens
    assert mem.hybrid_attention_block_size_tokens(3_207_168, 4096) == 784
    # an exact multiple needs no extra alignment step
    assert mem.hybrid_attention_block_size_tokens(2_146_304, 1024) == 2096
    # a user block size above the aligned size is kept
    assert mem.hybrid_attention_block_size_tokens(1024, 1024, block_size_tokens=64) == 64


def test_groups_split_by_the_smaller_kind_or_pad_when_close() -> None:
    assert mem.kv_cache_groups(16, 48) == mem.KvGroups(16, 1, 3)
    assert mem.kv_cache_groups(17, 48) == mem.KvGroups(17, 1, 3)  # MTP layer joins attention
    assert mem.kv_cache_groups(13, 12) == mem.KvGroups(13, 1, 1)  # pad 12 -> 13
    assert mem.kv_cache_groups(36, 0) == mem.KvGroups(36, 1, 0)


def test_mamba_blocks_per_request_by_mode() -> None:
    assert mem.mamba_cache_mode(False) == "none"
    assert mem.mamba_cache_mode(True) == "align"
    assert mem.mamba_blocks_per_request_per_group("none", 3, 4096, 16) == 4
    assert mem.mamba_blocks_per_request_per_group("align", 3, 4096, 16) == 5
    assert mem.mamba_blocks_per_request_per_group("all", 0, 4096, 16) == 256


def test_printed_kv_tokens_is_concurrency_times_length_not_blocks_times_size() -> None:
    groups = mem.KvGroups(10, 1, 3)
    per_request = mem.blocks_per_request(131072, 2096, groups, 2)
    assert per_request == 63 + 6
    concurrency = mem.max_concurrency(300, per_request)
    assert mem.printed_kv_tokens(concurrency, 131072) == 569_878  # club-3090#652
    assert 300 * 2096 != 569_878


def test_num_blocks_divides_by_page_and_group_size() -> None:
    assert mem.num_kv_blocks(10 * 65536 * 36 + 5, 65536, 36) == 10
    assert mem.num_kv_blocks(-1, 65536, 36) == 0


def test_cudagraph_capture_size_follows_max_num_seqs() -> None:
    assert mem.max_cudagraph_capture_size(1024) == 512
    assert mem.max_cudagraph_capture_size(2) == 4


def test_estimates_scale_with_their_inputs() -> None:
    """The estimates' values are checked against the H200's profiled peaks
    (test_vllm_h200.py); here, how they move."""
    line = vllm_line("0.26.0")
    v1_sampler = mem.sampler_cost(line, "v1", speculative=False)
    small = mem.activation_peak_bytes_estimate(2048, 4096, 24576, 256, 151936, 2, v1_sampler)
    large = mem.activation_peak_bytes_estimate(8192, 4096, 24576, 1024, 151936, 2, v1_sampler)
    assert large == 4 * small
    plain = mem.activation_peak_bytes_estimate(8192, 5120, 34816, 1024, 248320, 2, v1_sampler)
    spec_sampler = mem.sampler_cost(line, "v1", speculative=True)
    with_mtp = mem.activation_peak_bytes_estimate(8192, 5120, 34816, 1024, 248320, 2, spec_sampler)
    assert with_mtp > plain  # the speculative sampler keeps more per row
    # the V2 runner (dense models) samples without top-k/top-p work
    v1 = mem.activation_peak_bytes_estimate(8192, 4096, 24576, 1024, 151936, 2, v1_sampler)
    v2_sampler = mem.sampler_cost(line, "v2", False)
    v2 = mem.activation_peak_bytes_estimate(8192, 4096, 24576, 1024, 151936, 2, v2_sampler)
    assert v2 < v1
    assert mem.sampler_cost(line, "v2", speculative=True) == line.v2_sampler
    # the chunked GDN state is per value head: TP2 holds half
    tp1 = mem.gdn_chunk_state_bytes(8192, QWEN36_GDN.ssm_state_bytes(1, 2))
    assert mem.gdn_chunk_state_bytes(8192, QWEN36_GDN.ssm_state_bytes(2, 2)) * 2 == tp1
    assert mem.gdn_chunk_state_bytes(16384, QWEN36_GDN.ssm_state_bytes(1, 2)) == 2 * tp1
    # 8192 tokens are 128 chunks of 64, each one bf16 SSM state: 48 x 128 x 128 x 2 = 1.5 MiB
    assert tp1 == 128 * 1_572_864
    assert mem.cudagraph_bytes_estimate(True, 512, line) == 0
    assert mem.cudagraph_bytes_estimate(False, 512, line) > mem.cudagraph_bytes_estimate(False, 4, line)
    assert mem.non_torch_bytes_estimate(2, line) > mem.non_torch_bytes_estimate(1, line)


def _qwen36_27b_inputs(**changes: object) -> VllmInputs:
    base: dict[str, object] = dict(
        gpu_total_bytes=int(95.6 * GIB),
        gpu_memory_utilization=0.9,
        tp_size=1,
        max_model_len=32768,
        max_num_seqs=1024,
        max_num_batched_tokens=8192,
        weights_bytes=int(51.0 * GIB),
        activation_peak_bytes=int(4.0 * GIB),
        non_torch_bytes=int(0.15 * GIB),
        cudagraph_bytes=int(1.0 * GIB),
        attention_layers=16,
        mamba_layers=48,
        attention_bytes_per_token_per_layer=4096,
        mamba_state_bytes_per_layer=3_207_168,
        num_speculative_tokens=0,
        prefix_caching=False,
        full_cudagraphs=True,
    )
    base.update(changes)
    return VllmInputs(**base)  # type: ignore[arg-type]


def test_allocation_picks_the_block_size_vllm_printed_and_fits() -> None:
    """784 tokens: what vLLM printed for this shape on the H200; the budget, pool and
    concurrency relations are properties (test_plan_properties.py)."""
    alloc = allocate(_qwen36_27b_inputs())
    assert alloc.block_size_tokens == 784
    assert alloc.groups == mem.kv_cache_groups(16, 48)
    assert alloc.fits_one_request


def test_a_measured_kv_budget_replaces_the_estimate() -> None:
    alloc = allocate(_qwen36_27b_inputs(available_kv_bytes_measured=GIB))
    assert alloc.available_kv_bytes == GIB
    assert not alloc.fits_one_request  # 45 blocks x 16 layers x 3.2 MB > 1 GiB
    assert 0 < alloc.largest_max_model_len < 32768


def test_human_readable_lengths_follow_vllm() -> None:
    from specpilot.plan.vllm.planner import parse_human_int

    assert parse_human_int("32768", "--max-model-len") == 32768
    assert parse_human_int("32K", "--max-model-len") == 32768
    assert parse_human_int("25.6k", "--max-model-len") == 25600
    assert parse_human_int("8G", "--kv-cache-memory-bytes") == 8 * GIB
    with pytest.raises(UserError):
        parse_human_int("lots", "--max-model-len")


def test_version_lines_cover_the_supported_releases() -> None:
    assert vllm_line("0.26.0") is not vllm_line("0.32.0")
    with pytest.raises(UserError):
        vllm_line("0.8.5")
