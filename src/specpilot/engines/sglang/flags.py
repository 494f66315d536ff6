"""What SGLang does with its flags beyond argparse: value ranges and field renames.

The flags themselves are the per-release tables in flags/<release>.json
(tools/extract_sglang_flags.py), read through engines/flags.py.
"""

from __future__ import annotations

from specpilot.engines.flags import ReleaseTable, load_tables
from specpilot.engines.ranges import ValueRange


def release_tables() -> tuple[ReleaseTable, ...]:
    """SGLang's shipped tables, oldest first: its plain argparse refuses `--max_num_seqs`,
    `-O3` and `--config.key value`."""
    return load_tables("sglang", "specpilot.engines.sglang", flexible_parser=False)


_SERVER_ARGS = "https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/server_args.py"

#: values SGLang cannot start with (sizes and counts of at least one; a memory fraction)
VALUE_RANGES: tuple[ValueRange, ...] = (
    ValueRange("mem_fraction_static", 0, 1, above_minimum=True, source=_SERVER_ARGS),
    ValueRange("context_length", 1, source=_SERVER_ARGS),
    ValueRange("max_running_requests", 1, source=_SERVER_ARGS),
    ValueRange("max_total_tokens", 1, source=_SERVER_ARGS),
    ValueRange("page_size", 1, source=_SERVER_ARGS),
    ValueRange("tensor_parallel_size", 1, source=_SERVER_ARGS),
    ValueRange("tp_size", 1, source=_SERVER_ARGS),
    ValueRange("pipeline_parallel_size", 1, source=_SERVER_ARGS),
    ValueRange("pp_size", 1, source=_SERVER_ARGS),
    ValueRange("data_parallel_size", 1, source=_SERVER_ARGS),
    ValueRange("dp_size", 1, source=_SERVER_ARGS),
)

#: argparse dests that `ServerArgs.from_cli_args` renames to the field the server reads
#: (server_args.py, every release covered): specpilot keys values by the field name, so
#: `--tp-size 2` is `tp_size` whichever spelling came first in that release's argparse.
#: `--cuda-graph-max-bs` became the decode graphs' limit in 0.5.14 (`cuda_graph_max_bs_decode`).
FIELD_OF_DEST: dict[str, str] = {
    "tensor_parallel_size": "tp_size",
    "pipeline_parallel_size": "pp_size",
    "attention_context_parallel_size": "attn_cp_size",
    "moe_data_parallel_size": "moe_dp_size",
    "data_parallel_size": "dp_size",
    "expert_parallel_size": "ep_size",
    "cuda_graph_max_bs_decode": "cuda_graph_max_bs",
}
