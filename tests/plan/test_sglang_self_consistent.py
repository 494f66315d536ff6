"""Every SGLang recommendation plans as fitting when its knobs are pinned, with the same margin,
and more fraction, slots or requests never turns "does not fit" into "fits": over a generated
grid of dense, hybrid and hybrid-MoE shapes, contexts 2k..262k (up to the model's), cards
24..141 GiB, no speculation or NEXTN with 1..4 steps, fp8 and bf16 KV caches."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hypothesis import event, given, settings
from hypothesis import strategies as st

from specpilot.check.resolved import resolve
from specpilot.engines.sglang.releases import release_rules
from specpilot.plan import make_plan, plan_inputs
from specpilot.plan.sglang import quantities as q
from specpilot.plan.sglang.planner import Sizing, blocking_problems, planner_settings, size
from specpilot.spec import Spec

MODELS = Path(__file__).resolve().parents[2] / "examples" / "models"
GRID = settings(max_examples=25, deadline=None, database=None, derandomize=True)
VERSION = "0.5.17"


@dataclass(frozen=True)
class Shape:
    model: str
    max_context: int
    mtp: bool


SHAPES = {
    "dense": Shape("qwen3-8b", 40960, mtp=False),
    "hybrid": Shape("qwen3.6-27b", 262144, mtp=True),
    "hybrid-moe": Shape("qwen3.6-35b-a3b-vllm", 262144, mtp=True),
}


@st.composite
def configs(draw: st.DrawFn) -> tuple[Shape, float, list[str]]:
    shape = SHAPES[draw(st.sampled_from(sorted(SHAPES)))]
    context = min(2 ** draw(st.integers(11, 18)), shape.max_context)
    card = round(draw(st.floats(24.0, 141.0)), 1)
    args = ["--context-length", str(context)]
    if draw(st.booleans()):
        args += ["--kv-cache-dtype", "fp8_e4m3"]
    steps = draw(st.integers(0, 4)) if shape.mtp else 0
    if steps:
        args += ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", str(steps)]
        args += ["--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(steps + 1)]
    return shape, card, args


def _spec(shape: Shape, card: float, args: list[str], env: dict[str, str] | None = None) -> Spec:
    return Spec.model_validate(
        {
            "name": "grid",
            "model": {"path": str(MODELS / shape.model)},
            "gpu": {"memory_gib": card},
            "engine": {"name": "sglang", "version": VERSION, "args": args, "env": env or {}},
        }
    )


def _sizing(spec: Spec) -> Sizing:
    shape, args = plan_inputs(spec)
    s = planner_settings(spec, shape, args)
    return size(
        shape,
        s,
        release_rules(VERSION),
        free_before_load_gib=q.free_before_load_gib(spec.gpu.memory_gib, s.tp_size),
        weights_gib=q.target_weights_gib(shape, s),
    )


def _fits(spec: Spec) -> bool:
    shape, _ = plan_inputs(spec)
    return not blocking_problems(_sizing(spec), shape)


def _with(args: list[str], flag: str, value: str) -> list[str]:
    """`args` with `flag` set to `value` (replaced where present)."""
    if flag in args:
        at = args.index(flag)
        return [*args[:at], flag, value, *args[at + 2 :]]
    return [*args, flag, value]


@GRID
@given(config=configs())
def test_pinning_the_recommendation_plans_as_fitting_with_the_same_margin(
    config: tuple[Shape, float, list[str]],
) -> None:
    shape, card, args = config
    plan = make_plan(resolve(_spec(shape, card, args)))
    if not plan.recommended_args:
        event("nothing fits")
        return  # nothing fits this card: the plan says so (use more GPUs)
    event("recommended")
    pinned_args = list(args)
    rec = plan.recommended_args
    for at in range(0, len(rec), 2):
        pinned_args = _with(pinned_args, rec[at], rec[at + 1])
    pinned = _spec(shape, card, pinned_args, dict(plan.recommended_env))
    z = _sizing(pinned)
    assert _fits(pinned), (card, pinned_args)
    assert z.margin_gib >= z.required_margin_gib - 1e-9, (card, pinned_args, z.margin_gib)
    assert make_plan(resolve(pinned)).fits


@GRID
@given(
    config=configs(), fraction=st.integers(60, 97), step=st.sampled_from(["fraction", "requests", "slots"])
)
def test_more_fraction_slots_or_requests_never_turn_does_not_fit_into_fits(
    config: tuple[Shape, float, list[str]], fraction: int, step: str
) -> None:
    shape, card, args = config
    base = _with(args, "--mem-fraction-static", f"{fraction / 100:.2f}")
    base = _with(base, "--max-running-requests", "16")
    if shape.model != "qwen3-8b":
        base = _with(base, "--max-mamba-cache-size", "48")
    if "--speculative-algorithm" in base and shape.model != "qwen3-8b":
        base = _with(base, "--mamba-radix-cache-strategy", "extra_buffer")
    more = {
        "fraction": _with(base, "--mem-fraction-static", f"{(fraction + 1) / 100:.2f}"),
        "requests": _with(base, "--max-running-requests", "17"),
        "slots": _with(base, "--max-mamba-cache-size", "51") if shape.model != "qwen3-8b" else base,
    }[step]
    if not _fits(_spec(shape, card, base)):
        event("base does not fit")
        assert not _fits(_spec(shape, card, more)), (card, step, base)
