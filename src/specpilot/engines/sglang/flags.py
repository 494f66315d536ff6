"""SGLang's per-release flag tables (flags/<release>.json, from tools/extract_sglang_flags.py).

`release_flags(version)` is the hook `specpilot.engines.args.flag_table` calls: every flag the
release's argparse defines, as `FlagDef`s, from the newest shipped table at or below `version`.
"""

from __future__ import annotations

from specpilot.check.flagtable import table_for
from specpilot.check.ranges import ValueRange
from specpilot.engines.args import FlagDef, flag_kind

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


def release_flags(version: str) -> list[FlagDef]:
    from packaging.version import Version

    table = table_for("sglang", Version(version))
    return [
        FlagDef(
            name=f.name,
            dest=FIELD_OF_DEST.get(f.dest, f.dest),
            kind=flag_kind(f.kind),
            default=f.default,
            aliases=f.aliases,
            choices=f.choices,
        )
        for f in table.flags
    ]
