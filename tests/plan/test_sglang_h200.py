"""The SGLang planner against a real SGLang on the H200 (gpu/sglang/run_matrix.sh, 2026-11-30).

24 starts of SGLang 0.5.13.post1 (the incident's release) and 0.5.17 with random weights:
Qwen3.6-27B with and without NEXTN MTP (draft lengths 2 and 4), Qwen3-8B dense, cards of
79.6 / 95.6 GiB (emulated: another process holds the rest) and the whole 139.8 GiB card,
default and explicit --mem-fraction-static, explicit --max-mamba-cache-size and
--max-running-requests, both mamba strategies, CUDA graphs on and off. Each log (with its
date, GPU, release and flags in its header) and the spec it ran are in
tests/data/startup_logs/sglang-h200/. Round 1 ("r13-*"/"r17-*" without "rec2") fitted the
planner's measured constants; round 2 ("*-rec2-*") started every configuration the fitted
plan recommends, out of sample. docs/gpu-validation.md has the tables.

Targets: from the plan alone, KV tokens within 2%, state slots and max running requests
exact, the verdict right (fits exactly when the engine reached ready); calibrated from the
log cut at the target's weight-loading line, KV tokens within 1%.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specpilot.check.resolved import resolve
from specpilot.models.shape import ModelShape
from specpilot.plan import make_plan, plan_inputs
from specpilot.plan.calibrate import calibrate_from_log
from specpilot.plan.sglang import quantities as q
from specpilot.plan.sglang.log import parse_sglang_log
from specpilot.plan.sglang.planner import planner_settings
from specpilot.plan.sglang.settings import SglangSettings
from specpilot.plan.types import GIB, Plan
from specpilot.spec import load_spec

DATA = Path(__file__).resolve().parents[1] / "data" / "startup_logs" / "sglang-h200"
RUNS = sorted(p.stem for p in DATA.glob("*.toml"))
READY = "The server is fired up and ready to roll"
#: the target's pools (a draft's come second); "GB" are GiB, printed to two decimals
KV_LINE = re.compile(
    r"KV Cache is allocated\. dtype: \S+, #tokens: (\d+), K size: ([\d.]+) GB, V size: ([\d.]+) GB"
)
MAMBA_LINE = re.compile(
    r"Mamba Cache is allocated\. max_mamba_cache_size: (\d+), conv_state size: ([\d.]+)GB, ssm_state size: ([\d.]+)GB"
)
PRINTED_GIB = 0.005 + 1e-9


def _text(run: str) -> str:
    return (DATA / f"{run}.log").read_text()


def _ready(run: str) -> bool:
    return READY in _text(run)


def _plan_alone(run: str) -> Plan:
    return make_plan(resolve(load_spec(DATA / f"{run}.toml")))


def _plan_calibrated(run: str, tmp_path: Path) -> Plan:
    lines = _text(run).splitlines(keepends=True)
    end = next(i for i, line in enumerate(lines) if "Load weight end" in line)
    cut = tmp_path / f"{run}.log"
    cut.write_text("".join(lines[: end + 1]))
    spec, measured = calibrate_from_log(resolve(load_spec(DATA / f"{run}.toml")), cut)
    return make_plan(resolve(spec), measured)


def test_the_matrix_is_all_there() -> None:
    assert len(RUNS) == 24
    assert sum(_ready(run) for run in RUNS) == 19
    assert {load_spec(DATA / f"{run}.toml").engine.version for run in RUNS} == {"0.5.13.post1", "0.5.17"}


@pytest.mark.parametrize("run", RUNS)
def test_the_spec_is_what_the_engine_ran(run: str) -> None:
    """The spec's flags are the argv the log header records (less host and port)."""
    spec = load_spec(DATA / f"{run}.toml")
    argv_line = next(line for line in _text(run).splitlines() if line.startswith("# argv "))
    argv = argv_line.split()[4:]  # after "# argv python3 gpu/sglang/launch.py"
    placing = {"--model-path", "--host", "--port"}
    kept = [a for i, a in enumerate(argv) if a not in placing and (i == 0 or argv[i - 1] not in placing)]
    assert kept == spec.engine.args
    assert f"sglang {spec.engine.version} " in _text(run)


@pytest.mark.parametrize("run", RUNS)
def test_the_verdict_is_the_engines(run: str) -> None:
    plan = _plan_alone(run)
    assert plan.fits is _ready(run), [p.message for p in plan.problems]


@pytest.mark.parametrize("run", [r for r in RUNS if parse_sglang_log(_text(r)).kv_tokens is not None])
def test_plan_alone_kv_tokens_within_2_percent(run: str) -> None:
    printed = parse_sglang_log(_text(run))
    assert _plan_alone(run).kv_tokens == pytest.approx(printed.kv_tokens, rel=0.02)


@pytest.mark.parametrize("run", [r for r in RUNS if parse_sglang_log(_text(r)).kv_tokens is not None])
def test_calibrated_kv_tokens_within_1_percent(run: str, tmp_path: Path) -> None:
    printed = parse_sglang_log(_text(run))
    assert _plan_calibrated(run, tmp_path).kv_tokens == pytest.approx(printed.kv_tokens, rel=0.01)


@pytest.mark.parametrize("run", [r for r in RUNS if _ready(r)])
def test_state_slots_and_max_running_requests_exact(run: str) -> None:
    printed = parse_sglang_log(_text(run))
    plan = _plan_alone(run)
    assert plan.max_running_requests == printed.max_running_requests
    if printed.max_mamba_cache_size is not None:
        assert plan.state_slots == printed.max_mamba_cache_size


@pytest.mark.parametrize("run", [r for r in RUNS if "rec2" in r])
def test_every_round_2_recommendation_still_fits_and_none_fell(run: str) -> None:
    """Round 2 ran the plan's recommendation of its day for its card and release and reached
    ready. Since then the state split searches past a reserve that is not monotone in requests,
    and 0.5.17 has a fit: the spec as it ran still plans as fitting, and the plan of the card
    without the knobs recommends at least that fraction and at least that many requests."""
    spec = load_spec(DATA / f"{run}.toml")
    assert _ready(run)
    assert make_plan(resolve(spec)).fits
    plan = _plan_alone(run)
    assert plan.fits and plan.recommended_args
    args, ran = plan.recommended_args, spec.engine.args

    def value(flags: list[str], name: str) -> float:
        return float(flags[flags.index(name) + 1])

    assert value(args, "--mem-fraction-static") >= value(ran, "--mem-fraction-static")
    assert value(args, "--max-running-requests") >= value(ran, "--max-running-requests")
    assert plan.details.margin_gib > 0


def _settings(run: str) -> tuple[ModelShape, SglangSettings]:
    spec = load_spec(DATA / f"{run}.toml")
    shape, args = plan_inputs(spec)
    return shape, planner_settings(spec, shape, args)


@pytest.mark.parametrize("run", [r for r in RUNS if KV_LINE.search(_text(r))])
def test_the_kv_cell_is_what_the_engine_allocated(run: str) -> None:
    """The engine prints the token count and the K and V buffer sizes it allocated: the
    planner's bytes per token (half K, half V) times that count are those sizes."""
    found = KV_LINE.search(_text(run))
    assert found is not None
    tokens, k_gib, v_gib = int(found[1]), float(found[2]), float(found[3])
    shape, s = _settings(run)
    half_cell_bytes = q.kv_bytes_per_token(shape, s) / 2
    assert tokens * half_cell_bytes / GIB == pytest.approx(k_gib, abs=PRINTED_GIB)
    assert tokens * half_cell_bytes / GIB == pytest.approx(v_gib, abs=PRINTED_GIB)


@pytest.mark.parametrize("run", [r for r in RUNS if MAMBA_LINE.search(_text(r))])
def test_the_state_per_request_is_what_the_engine_allocated(run: str) -> None:
    """The engine prints its slot count and the conv and SSM buffer sizes; both buffers hold
    one padding slot more than the count, in every release."""
    found = MAMBA_LINE.search(_text(run))
    assert found is not None
    buffer_slots, conv_gib, ssm_gib = int(found[1]) + 1, float(found[2]), float(found[3])
    shape, s = _settings(run)
    layers = shape.linear_attention_layers
    gdn = q.gdn_layer(shape, s.tp_size)
    assert gdn is not None
    conv_bytes = gdn.conv_state_bytes(s.tp_size, s.conv_dtype_bytes)
    assert buffer_slots * layers * conv_bytes / GIB == pytest.approx(conv_gib, abs=PRINTED_GIB)
    ssm_bytes = gdn.ssm_state_bytes(s.tp_size, s.ssm_dtype_bytes)
    assert buffer_slots * layers * ssm_bytes / GIB == pytest.approx(ssm_gib, abs=PRINTED_GIB)


@pytest.mark.parametrize("run", RUNS)
def test_target_weights_are_the_printed_load(run: str) -> None:
    """ "Load weight end ... mem usage": the planner's parameter count x dtype, MTP head
    excluded (it loads with the draft), within 0.5%."""
    printed = parse_sglang_log(_text(run))
    assert _plan_alone(run).weights_gib == pytest.approx(printed.weights_gib, rel=0.005)


DEFAULT_FRACTION_RUNS = [
    r for r in RUNS if "--mem-fraction-static" not in load_spec(DATA / f"{r}.toml").engine.args
]


@pytest.mark.parametrize(
    "run",
    [
        pytest.param(
            r,
            marks=pytest.mark.xfail(
                strict=True,
                reason="0.5.13.post1 without speculation printed 0.838762 where the planner's "
                "reservation gives 0.837838 (one step of the engine's 3-decimal rounding before "
                "the vision factor); the speculative run of the same release matches exactly",
            ),
        )
        if r == "r13-plain-def-140"
        else r
        for r in DEFAULT_FRACTION_RUNS
    ],
)
def test_the_default_fraction_is_the_printed_one(run: str) -> None:
    """Without --mem-fraction-static the engine prints the fraction its reservation formula
    and vision-tower factor chose: the planner's is the same number."""
    printed = parse_sglang_log(_text(run))
    assert _plan_alone(run).memory_fraction == pytest.approx(printed.mem_fraction_static, abs=1e-9)


def test_a_longer_context_costs_the_kv_tokens_the_engine_lost(tmp_path: Path) -> None:
    """The one pair of starts that differ only in --context-length (0.5.13.post1, 95.6 GiB,
    0.95, 171 state slots both): at 262,144 the engine kept 320 fewer KV tokens than at 32,768,
    because the rotary cache regrows for the longer context before the memory profile (the
    request-to-token table is allocated after it, out of the reserve). The plan loses the
    same, to within 64 tokens (4 MiB, under the log's 0.01 GB printing)."""
    long_run, short_run = "r13-plain-rec-96", "r13-plain-rec2-96"
    printed_loss = parse_sglang_log(_text(short_run)).kv_tokens - parse_sglang_log(_text(long_run)).kv_tokens
    assert printed_loss == 320
    for plan_of in (_plan_alone, lambda run: _plan_calibrated(run, tmp_path)):
        planned_loss = plan_of(short_run).kv_tokens - plan_of(long_run).kv_tokens
        assert planned_loss == pytest.approx(printed_loss, abs=64)


#: the default fraction of this start is one rounding step off (the xfail below): its KV is
#: off by that, not by the calibration
FRACTION_OFF = "r13-plain-def-140"


def test_calibrated_kv_tokens_carry_no_bias_at_either_context_length(tmp_path: Path) -> None:
    """Calibrated from the log, every start lands within 0.25% of the printed KV tokens, and
    the mean error at each context length is within 0.1%: before the context term the starts at
    32,768 tokens were all low (-0.2% to -0.6%)."""
    errors: dict[int, list[float]] = {}
    for run in RUNS:
        printed = parse_sglang_log(_text(run))
        if printed.kv_tokens is None or run == FRACTION_OFF:
            continue
        plan = _plan_calibrated(run, tmp_path)
        error = plan.kv_tokens / printed.kv_tokens - 1
        assert abs(error) < 0.0025, (run, error)
        errors.setdefault(plan.details.context_len_tokens, []).append(error)
    assert {32768, 262144} <= errors.keys()
    for context, found in errors.items():
        assert abs(sum(found) / len(found)) < 0.001, (context, found)
