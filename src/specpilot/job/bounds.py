"""What a job changes before restarting an engine that died of memory while serving.

Each rule is data: the engine, what in the log since ready tells this death apart (every
pattern needs the out-of-memory line itself), the flag that bounds what killed it, and where
its value starts when the spec does not set it. A restart halves the flag's value (at least
1); a flag already at 1 leaves nothing to bound and the engine is restarted as it was. The
first rule that matches applies.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from specpilot.spec import Spec


@dataclass(frozen=True)
class Bound:
    engine: str
    #: the death, in words (printed and recorded with the change)
    what: str
    pattern: re.Pattern[str]
    flag: str
    #: the value to halve when the spec does not set `flag`: another flag's, else `default`
    start_from: str | None
    default: int
    source: str


_OOM = r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory"

BOUNDS: tuple[Bound, ...] = (
    Bound(
        "sglang",
        "the radix cache's copy-on-write of SSM states ran out of memory",
        re.compile(rf"(?:mamba_cow|mamba_pool\.copy_from)[\s\S]*(?:{_OOM})"),
        "--prefill-max-requests",
        "--max-running-requests",
        16,
        "tests/data/gpu-runs/sglang-0.5.17-h200-job/engine.log (SGLang 0.5.17 on an H200: "
        "model_runner._maybe_execute_deferred_mamba_cow_and_clear, one copy per request a prefill takes)",
    ),
    Bound(
        "sglang",
        "the engine ran out of memory while serving",
        re.compile(_OOM),
        "--max-running-requests",
        None,
        64,
        "https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/server_args.py "
        "(--max-running-requests bounds the batch a step holds)",
    ),
    Bound(
        "vllm",
        "the engine ran out of memory while serving",
        re.compile(_OOM),
        "--max-num-seqs",
        None,
        256,
        "https://github.com/vllm-project/vllm/blob/main/vllm/engine/arg_utils.py (max_num_seqs)",
    ),
)


def flag_value(args: list[str], flag: str) -> int | None:
    """The last integer value of `flag` in an argv (`--flag N` or `--flag=N`)."""
    found: int | None = None
    for i, arg in enumerate(args):
        text = arg.partition("=")[2] if arg.startswith(flag + "=") else None
        if arg == flag and i + 1 < len(args):
            text = args[i + 1]
        if text is not None and text.strip().isdigit():
            found = int(text)
    return found


def _without(args: list[str], flag: str) -> list[str]:
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == flag:
            skip = True
            continue
        if not arg.startswith(flag + "="):
            kept.append(arg)
    return kept


@dataclass(frozen=True)
class Bounded:
    spec: Spec
    rule: Bound
    before: int | None
    after: int

    def line(self) -> str:
        was = "unset" if self.before is None else str(self.before)
        return f"{self.rule.what}: restarting with {self.rule.flag} {self.after} (was {was})"

    def to_json(self) -> dict[str, object]:
        return {"what": self.rule.what, "flag": self.rule.flag, "before": self.before, "after": self.after}


def bound_for(spec: Spec, serving_log: str) -> Bounded | None:
    """The spec to restart with after a death whose log since ready is `serving_log` (the whole
    of it: the process can be found gone before its last lines were read); None when no rule
    matches or the flag is already at 1."""
    for rule in BOUNDS:
        if rule.engine != spec.engine.name or not rule.pattern.search(serving_log):
            continue
        args = list(spec.engine.args)
        before = flag_value(args, rule.flag)
        start = before
        if start is None and rule.start_from is not None:
            start = flag_value(args, rule.start_from)
        start = start if start is not None else rule.default * 2
        after = max(1, start // 2)
        if before is not None and after >= before:
            return None
        engine = spec.engine.model_copy(update={"args": [*_without(args, rule.flag), rule.flag, str(after)]})
        return Bounded(spec.model_copy(update={"engine": engine}), rule, before, after)
    return None
