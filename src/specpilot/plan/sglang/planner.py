"""SGLang memory plan: what the engine will allocate, whether it fits, what to change.

`plan_sglang` is pure: spec + model shape + the flags as `check` evaluates them in,
`Plan` out. It turns those into sizing inputs (`settings`), runs the engine's
arithmetic on them (`quantities`), checks that everything allocated after
the pools fits in the reserve, and searches the knobs a user controls
(`--mem-fraction-static`, `--max-mamba-cache-size`, `--max-running-requests`) for
values that start first time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from specpilot.check.effective import EffectiveArgs
from specpilot.dtypes import DTYPE_BYTES
from specpilot.engines.fix import Fix
from specpilot.engines.logfacts import LogFacts
from specpilot.engines.rules import env_bool
from specpilot.engines.sglang.postpool import PostPoolFit
from specpilot.engines.sglang.releases import SglangRelease, release_rules
from specpilot.models.layers import layer_specs
from specpilot.models.shape import ModelShape
from specpilot.plan.effective import effective_args_without
from specpilot.plan.fraction import FRACTION_STEP, LOWEST_FRACTION
from specpilot.plan.log_checks import refuse_footprint
from specpilot.plan.sglang import quantities as q
from specpilot.plan.sglang.log import parse_sglang_log, prefill_capture_oom
from specpilot.plan.sglang.margin import highest_fraction, required_margin_gib
from specpilot.plan.sglang.settings import POST_CAPTURE_ENV, SglangSettings, resolve_settings
from specpilot.plan.types import GIB, Plan, PrefillGate, Problem, SglangDetails, Term
from specpilot.spec import Spec

__all__ = ["parse_sglang_log", "plan_sglang"]

#: Mean tokens per completion in the incident's job (1.87e9 tokens / 902,087 rows,
#: incident.md); the recommendation leaves KV room for twice that per running request.
BULK_MEAN_TOKENS_PER_REQUEST = 2073
KV_TOKENS_PER_REQUEST_TARGET = 2 * BULK_MEAN_TOKENS_PER_REQUEST
#: One request must still be able to reach this length (or the context length, if less).
LONG_REQUEST_TOKENS = 32768
#: Speculative decoding is flagged for offline bulk generation when running without it
#: allows this many times more concurrent requests (see `speculative_note`).
SPECULATIVE_CONCURRENCY_FACTOR = 2.0
#: the hybrid search stops after this many fraction steps without more concurrency
PLATEAU_FRACTIONS = 5
#: Term.note of memory that is needed only for a while (see `Sizing.reserve_needed_gib`)
PEAK = "peak"
#: Term.note of a fit's prefill graph capture transient, and of what is allocated after it
CAPTURE_PEAK = "capture peak"
AFTER_CAPTURE = "after capture"
#: Term.source of a post-pool term fitted to measured startup peaks (the row's `post_pool_fit`)
FITTED = "fitted"
#: the head of the prefill graph's term name
PREFILL_GRAPH_TERM = "prefill CUDA graphs"
#: how close to a release's prefill-graph gate the plan calls it a cliff, GiB
GATE_BAND_GIB = 1.0
#: a release without a fit: every post-pool term estimated
NO_FIT = PostPoolFit(0.0, "", "")
#: below the most requests the KV pool allows, how many counts the state split tries for margin
MARGIN_SCAN_REQUESTS = 64


@dataclass(frozen=True)
class Sizing:
    """Every number of one configuration, as the engine would compute it."""

    settings: SglangSettings
    free_before_load_gib: float
    weights_gib: float
    draft_weights_gib: float
    reserve_gib: float
    #: memory the engine frees after the pools, before serving: from 0.5.14 the draft
    #: loads inside the profile with its own embedding and LM head, then drops them for
    #: the target's (they fall back to the reserve's side)
    freed_after_pools_gib: float
    multimodal_reserve_gib: float
    rest_gib: float
    pool: q.StatePool
    state_bytes_per_request: int
    kv_bytes_per_token: int
    pool_cell_bytes: int
    kv_tokens: int
    max_running_requests: int
    reserve_terms: tuple[Term, ...]
    #: with post-capture KV sizing: what graph capture allocated before the pool was sized
    #: again (out of the pools' budget, not the reserve)
    captured_terms: tuple[Term, ...] = ()
    #: the post-pool terms' fit to measured peaks (None: estimated)
    fit: PostPoolFit | None = None
    #: what of this configuration lies outside the fit's measured range (empty: inside)
    extrapolating: tuple[str, ...] = ()
    #: the largest prefill token count the engine captures as a graph (0: prefill eager)
    captured_prefill_tokens: int = 0

    @property
    def available_after_pools_gib(self) -> float:
        """What the allocations after the pools can use: the reserve plus what was freed."""
        return self.reserve_gib + self.freed_after_pools_gib

    @property
    def margin_gib(self) -> float:
        """Free memory left after the last allocation at startup (negative: OOM)."""
        return self.available_after_pools_gib - self.reserve_needed_gib

    @property
    def required_margin_gib(self) -> float:
        """Free memory a recommendation keeps beyond the post-pool terms (`margin`): the fit's
        stated margin inside its range, the larger extrapolation margin outside it."""
        return required_margin_gib(self.fit, self.reserve_needed_gib, bool(self.extrapolating))

    @property
    def free_at_prefill_capture_gib(self) -> float:
        """Free memory when the prefill graph's capture begins, what the release's gate reads:
        what the pools left, less everything allocated after them that is not a CUDA graph
        (the request table, a draft's KV cache, workspaces)."""
        before = [
            t.gib
            for t in self.reserve_terms
            if t.note not in (PEAK, CAPTURE_PEAK, AFTER_CAPTURE) and not t.name.startswith(PREFILL_GRAPH_TERM)
        ]
        return self.available_after_pools_gib - sum(before)

    @property
    def reserve_needed_gib(self) -> float:
        """Steady terms plus the larger of the peaks (load-time and serving peaks never
        coincide); with a fit's capture transient, also what was allocated before the capture
        plus that transient."""
        steady = sum(t.gib for t in self.reserve_terms if t.note not in (PEAK, CAPTURE_PEAK))
        peaks = [t.gib for t in self.reserve_terms if t.note == PEAK]
        needed = steady + max(peaks, default=0.0)
        capture = [t.gib for t in self.reserve_terms if t.note == CAPTURE_PEAK]
        if capture:
            before = steady - sum(t.gib for t in self.reserve_terms if t.note == AFTER_CAPTURE)
            needed = max(needed, before + max(capture))
        return needed


def _fitted(value: float | None, estimate: float) -> tuple[float, str]:
    """(GiB, source): a fit's value where it has one, else the estimate."""
    return (value, FITTED) if value is not None else (estimate, "estimated")


def _reserve_terms(
    shape: ModelShape,
    s: SglangSettings,
    rules: SglangRelease,
    tokens: int,
    requests: int,
    draft_gib: float,
    fit: PostPoolFit | None,
) -> tuple[Term, ...]:
    """What is allocated after the pools and so must fit in the reserve; a fit's values
    replace the estimates it covers. Every term reads the engine's resolved
    max_running_requests (`requests`), so pinning it to that value plans the same."""
    f = fit or NO_FIT
    s_run = replace(s, max_running_requests=requests or s.max_running_requests)
    activation = q.activation_gib(shape, s, requests)
    decode = None if f.decode_graph_family is None else q.decode_graphs_gib(s_run, *f.decode_graph_family)
    captured = q.captured_prefill_tokens(s, rules, requests)
    capture = f.capture_transient_scale is not None and bool(captured)
    terms = [
        Term("activations (prefill chunk + logits)", activation, "estimated", PEAK),
        Term(
            "attention backend workspace", *_fitted(f.attention_workspace_gib, q.attention_workspace_gib(s))
        ),
        Term(
            f"decode CUDA graphs ({q.decode_graph_families(s)} families)",
            *_fitted(decode, q.decode_graphs_gib(s_run)),
            AFTER_CAPTURE if capture else "",
        ),
        Term("request-to-token table", q.req_to_token_gib(requests, s), "config"),
        Term(
            "runtime buffers (not itemized, measured)",
            *_fitted(f.unitemized_gib, q.unitemized_runtime_gib(shape, rules)),
        ),
    ]
    if captured:  # prefill runs eagerly otherwise (multimodal models before 0.5.17)
        terms += _prefill_graph_terms(shape, s, rules, captured, f)
    if s.tp_size * s.pp_size > 1:
        terms.append(Term("TP communication buffers", q.tp_buffers_gib(s), "estimated"))
    return (*terms, *_draft_terms(shape, s, rules, tokens, draft_gib))


def _prefill_graph_terms(
    shape: ModelShape, s: SglangSettings, rules: SglangRelease, captured: int, f: PostPoolFit
) -> list[Term]:
    """The prefill graphs up to `captured` tokens, and with a fit's scale the transient of
    their capture."""
    per_token = f.prefill_graph_bytes_per_token_hidden_layer
    prefill = (
        None
        if per_token is None
        else q.prefill_graph_gib(
            shape, s, rules, captured, per_token, f.moe_prefill_graph_bytes_per_token_hidden_layer
        )
    )
    name = f"{PREFILL_GRAPH_TERM} (up to {captured} tokens)"
    terms = [Term(name, *_fitted(prefill, q.prefill_graph_gib(shape, s, rules, captured)))]
    if f.capture_transient_scale is not None:
        # the capture runs its largest token count eagerly first
        transient = q.prefill_activation_gib(shape, s, captured) * (f.capture_transient_scale or 0.0)
        terms.append(Term("prefill graph capture transient", transient, FITTED, CAPTURE_PEAK))
    return terms


def _draft_terms(
    shape: ModelShape, s: SglangSettings, rules: SglangRelease, tokens: int, draft_gib: float
) -> list[Term]:
    """A draft model's weights and load peak when it loads after the pools, and its KV cache
    when that is not part of the pools' cells."""
    if not s.has_draft_model:
        return []
    terms: list[Term] = []
    if not rules.draft_in_profile:
        terms += [
            Term("draft model weights", draft_gib, "estimated"),
            Term(
                "draft load peak (own embedding + LM head)",
                q.draft_load_transient_gib(shape, s),
                "estimated",
                PEAK,
            ),
        ]
    if not (rules.draft_in_profile and rules.draft_kv_in_cell):
        draft_kv = tokens * q.draft_kv_bytes_per_token(shape, s) / GIB
        terms.append(Term("draft KV cache", draft_kv, "config"))
    return terms


def extrapolating(fit: PostPoolFit | None, shape: ModelShape, s: SglangSettings) -> tuple[str, ...]:
    """What of this configuration lies outside the fit's measured range (empty: inside, or no
    fit: the estimates' padding applies everywhere)."""
    if fit is None or fit.valid is None:
        return ()
    return tuple(
        fit.valid.outside(shape.architecture, shape.is_moe, s.context_len, s.gpu_memory_mib / 1024, s.tp_size)
    )


def size(
    shape: ModelShape,
    s: SglangSettings,
    rules: SglangRelease,
    *,
    free_before_load_gib: float,
    weights_gib: float,
) -> Sizing:
    """Run the engine's sizing for one configuration."""
    fit = rules.post_pool_fit
    draft_gib = q.draft_weights_gib(shape, s)
    free_after_load, freed = _free_after_load(shape, s, rules, free_before_load_gib, weights_gib, draft_gib)
    reserve = free_before_load_gib * (1 - s.mem_fraction_static)
    mm_reserve = rules.multimodal_reserve_mib / 1024 if s.multimodal else 0.0
    rest = free_after_load - reserve - mm_reserve
    hybrid = shape.is_hybrid
    per_req = q.state_bytes_per_request(shape, s) if hybrid else 0
    pool = _state_pool(shape, s, rules, rest)
    cell = q.pool_cell_bytes(shape, s, rules)
    tokens = q.kv_tokens(pool.rest_for_kv_gib, cell, s)
    requests = q.max_running_requests(tokens, pool.slots, s, rules, hybrid) if tokens else 0
    terms = _reserve_terms(shape, s, rules, tokens, requests, draft_gib, fit)
    captured: tuple[Term, ...] = ()
    if s.post_capture_kv_sizing and tokens:
        # compute_post_capture_kv_resize: the pool shrinks to what capture left free, less
        # the headroom; only the transient peaks still need the headroom afterwards
        captured, terms = _split_at_capture(terms)
        reserve = _post_capture_headroom_gib(s, hybrid, requests, reserve)
        rest = free_after_load - reserve - mm_reserve - sum(t.gib for t in captured)
        pool, tokens, requests = _resized_pools(shape, s, rules, rest, cell, tokens, requests)
    return Sizing(
        settings=s,
        free_before_load_gib=free_before_load_gib,
        weights_gib=weights_gib,
        draft_weights_gib=draft_gib,
        reserve_gib=reserve,
        freed_after_pools_gib=freed,
        multimodal_reserve_gib=mm_reserve,
        rest_gib=rest,
        pool=pool,
        state_bytes_per_request=per_req,
        kv_bytes_per_token=q.kv_bytes_per_token(shape, s),
        pool_cell_bytes=cell,
        kv_tokens=tokens,
        max_running_requests=requests,
        reserve_terms=terms,
        captured_terms=captured,
        fit=fit,
        extrapolating=extrapolating(fit, shape, s),
        captured_prefill_tokens=q.captured_prefill_tokens(s, rules, requests),
    )


def _split_at_capture(terms: tuple[Term, ...]) -> tuple[tuple[Term, ...], tuple[Term, ...]]:
    """(what graph capture allocated before the pool is sized again, the transient peaks)"""
    return tuple(t for t in terms if t.note != PEAK), tuple(t for t in terms if t.note == PEAK)


def _free_after_load(
    shape: ModelShape,
    s: SglangSettings,
    rules: SglangRelease,
    free_before_load_gib: float,
    weights_gib: float,
    draft_gib: float,
) -> tuple[float, float]:
    """(free after the weights load, GiB the engine frees after the pools): from 0.5.14 the
    draft loads inside the profile too, with its own embedding and LM head."""
    free_after_load = (
        free_before_load_gib - weights_gib - rules.pre_profile_gib - q.rope_regrowth_gib(shape, s, rules)
    )
    if not rules.draft_in_profile:
        return free_after_load, 0.0
    freed = q.draft_load_transient_gib(shape, s)
    free_after_load -= draft_gib + freed
    return free_after_load, freed


def _state_pool(shape: ModelShape, s: SglangSettings, rules: SglangRelease, rest_gib: float) -> q.StatePool:
    """A hybrid model's state pool out of `rest_gib`; all of it is the KV's otherwise."""
    if shape.is_hybrid and rest_gib > 0:
        return q.state_pool(shape, s, rules, rest_gib)
    return q.StatePool(0, 0.0, 0.0, rest_gib)


def _resized_pools(
    shape: ModelShape,
    s: SglangSettings,
    rules: SglangRelease,
    rest_gib: float,
    cell: int,
    tokens: int,
    requests: int,
) -> tuple[q.StatePool, int, int]:
    """(pool, KV tokens, running requests) once the pools are sized again after capture:
    never more than the first sizing gave."""
    pool = _state_pool(shape, s, rules, rest_gib)
    tokens = min(tokens, q.kv_tokens(pool.rest_for_kv_gib, cell, s))
    if tokens:
        requests = min(requests, q.max_running_requests(tokens, pool.slots, s, rules, shape.is_hybrid))
    return pool, tokens, requests


def _post_capture_headroom_gib(s: SglangSettings, hybrid: bool, requests: int, reserve_gib: float) -> float:
    """The headroom the resized pool leaves: the reserve, raised to the pre-capture activation
    reserve (runtime_context.pre_capture_activation_reserve_mb) for hybrid models and when
    decode graphs stop below max_running_requests (decode then runs eagerly)."""
    eager_decode = not s.cuda_graph_disabled and s.cuda_graph_max_bs < requests
    if not (hybrid or eager_decode):
        return reserve_gib
    reserve_mib = 512 + max(s.chunked_prefill_size, 2048) * 1.5 + s.tp_size * s.pp_size / 8 * 1024
    if s.gpu_memory_mib > 60 * 1024:
        reserve_mib = max(reserve_mib, 10 * 1024)
    return max(reserve_gib, reserve_mib / 1024)


def blocking_problems(z: Sizing, shape: ModelShape) -> list[Problem]:
    """Why this configuration would fail to start (empty when it starts)."""
    s = z.settings
    problems: list[Problem] = []
    if z.rest_gib <= 0:
        problems.append(
            Problem(
                "weights_exceed_static_budget",
                f"weights leave {z.rest_gib:.2f} GiB for caches under mem_fraction_static="
                f"{s.mem_fraction_static:.3f}: SGLang stops with 'Not enough memory'",
            )
        )
        return problems
    if shape.is_hybrid and z.pool.slots <= 0:
        problems.append(
            Problem(
                "no_state_slots",
                "no room for a single hybrid state slot "
                f"({z.state_bytes_per_request / 2**20:.1f} MiB each): "
                "SGLang stops with 'Not enough GPU memory for hybrid ... state cache'",
            )
        )
    if z.kv_tokens <= 0:
        problems.append(
            Problem(
                "no_kv_tokens",
                f"{z.pool.rest_for_kv_gib:.2f} GiB left for the KV cache after the state pool: "
                "SGLang stops with 'Not enough memory. "
                "Please try to increase --mem-fraction-static'",
            )
        )
    elif z.max_running_requests <= 0:
        problems.append(
            Problem(
                "no_running_requests",
                f"{z.pool.slots} state slots at {q.state_slots_per_request(s)} per request "
                "serve no request: "
                "SGLang stops with 'state cache is too small to serve any requests'",
            )
        )
    shortfall = -z.margin_gib
    if shortfall > 0:
        largest = largest_transient(z)
        problems.append(
            Problem(
                "reserve_too_small",
                f"the reserve free_before_load x (1 - {s.mem_fraction_static:.3f}) = "
                f"{z.reserve_gib:.2f} GiB{_freed_text(z)} is {shortfall:.2f} GiB short of what is "
                f"allocated after the pools ({z.reserve_needed_gib:.2f} GiB; largest: {largest.name}, "
                f"{largest.gib:.2f} GiB): CUDA out of memory at draft load or graph capture. "
                "A higher --mem-fraction-static makes this worse, not better",
            )
        )
    return problems


def _freed_text(z: Sizing) -> str:
    return f" (+{z.freed_after_pools_gib:.2f} freed after the pools)" if z.freed_after_pools_gib else ""


def largest_transient(z: Sizing) -> Term:
    """The biggest single allocation after the pools: the one that runs out first."""
    return max(z.reserve_terms, key=lambda t: t.gib)


def _fraction_candidates(start: float) -> list[float]:
    steps = round((start - LOWEST_FRACTION) / FRACTION_STEP)
    return [round(start - i * FRACTION_STEP, 2) for i in range(steps + 1)]


def _fits_with_margin(z: Sizing, shape: ModelShape) -> bool:
    return not blocking_problems(z, shape) and z.margin_gib >= z.required_margin_gib


def _long_request_tokens(s: SglangSettings) -> int:
    return min(s.context_len, LONG_REQUEST_TOKENS)


def _best_state_split(
    shape: ModelShape, s: SglangSettings, rules: SglangRelease, free: float, weights: float
) -> Sizing | None:
    """The explicit state-slot count that maximises concurrency while every running
    request keeps `KV_TOKENS_PER_REQUEST_TARGET` tokens and one request can reach
    `_long_request_tokens`. Bisection over 1..4096 requests for the KV condition (more
    requests take memory from the KV pool, so it is monotone), then the most requests at or
    below that whose reserve keeps its margin (`MARGIN_SCAN_REQUESTS` tried): the answer is a
    configuration verified to fit."""
    ratio = q.state_slots_per_request(s)

    def sized(requests: int) -> Sizing:
        trial = replace(s, max_mamba_cache_size=requests * ratio, max_running_requests=requests)
        return size(shape, trial, rules, free_before_load_gib=free, weights_gib=weights)

    def enough_kv(z: Sizing, requests: int) -> bool:
        return z.kv_tokens >= max(requests * KV_TOKENS_PER_REQUEST_TARGET, _long_request_tokens(s))

    low, high = 0, 4096
    while low < high:  # the most requests the KV condition allows
        middle = (low + high + 1) // 2
        if enough_kv(sized(middle), middle):
            low = middle
        else:
            high = middle - 1
    # the reserve's margin is not monotone in requests: fewer requests mean a bigger KV pool
    # and so a bigger draft KV after the pools, more mean bigger graphs and logits
    for requests in range(low, max(low - MARGIN_SCAN_REQUESTS, 0), -1):
        z = sized(requests)
        if _fits_with_margin(z, shape):
            return z
    return None


def recommend(
    shape: ModelShape, s: SglangSettings, rules: SglangRelease, free: float, weights: float
) -> Sizing | None:
    """For hybrid models the `--mem-fraction-static` and state-slot split with the most
    concurrent requests (then the most KV tokens, then the higher fraction); for others the
    highest fraction that leaves the reserve its margin. None: nothing fits.

    The highest fitting fraction is not always the best for a hybrid model: where the
    reserve's margin is what binds, one step down frees room for many more state slots
    (a card with 84.9 GiB free: 15 requests at 0.95, about 40 at 0.94)."""
    if shape.is_hybrid:
        return _recommend_hybrid(shape, s, rules, free, weights)
    return _recommend_dense(shape, s, rules, free, weights)


def _recommend_hybrid(
    shape: ModelShape, s: SglangSettings, rules: SglangRelease, free: float, weights: float
) -> Sizing | None:
    """The fraction, from the highest the post-pool terms allow (`margin`) down, whose
    best state split serves the most requests; the search stops once `PLATEAU_FRACTIONS`
    steps bring nothing better."""
    best: Sizing | None = None
    since_better = 0
    for fraction in _fraction_candidates(highest_fraction(rules.post_pool_fit)):
        z = _best_state_split(shape, replace(s, mem_fraction_static=fraction), rules, free, weights)
        if z is not None and (best is None or _concurrency_first(z) > _concurrency_first(best)):
            best, since_better = z, 0
        elif best is not None:
            since_better += 1
            # concurrency rises while the reserve's margin binds, then falls with the pools
            if since_better >= PLATEAU_FRACTIONS:
                break
    return best


def _recommend_dense(
    shape: ModelShape, s: SglangSettings, rules: SglangRelease, free: float, weights: float
) -> Sizing | None:
    """The highest fraction that fits with margin and still holds one long request."""
    for fraction in _fraction_candidates(highest_fraction(rules.post_pool_fit)):
        trial = replace(s, mem_fraction_static=fraction)
        z = size(shape, trial, rules, free_before_load_gib=free, weights_gib=weights)
        if _fits_with_margin(z, shape) and z.kv_tokens >= _long_request_tokens(s):
            return z
    return None


def _concurrency_first(z: Sizing) -> tuple[int, int, float]:
    return z.max_running_requests, z.kv_tokens, z.settings.mem_fraction_static


def startable_settings(
    s: SglangSettings, shape: ModelShape, rules: SglangRelease
) -> tuple[SglangSettings, dict[str, str]]:
    """Settings the engine accepts, and the environment they need.

    SGLang refuses speculative decoding on a hybrid model with radix cache under
    no_buffer ("...please use --mamba-scheduler-strategy extra_buffer and set
    SGLANG_ENABLE_SPEC_V2=1"), so a recommendation never keeps that combination; releases
    that still read SGLANG_ENABLE_SPEC_V2 need it set for overlap scheduling.
    """
    if not (shape.is_hybrid and s.speculative_algorithm and not s.radix_cache_disabled):
        return s, {}
    env = {"SGLANG_ENABLE_SPEC_V2": "1"} if rules.spec_v2_default is not None else {}
    if s.mamba_strategy != "no_buffer":
        return s, env
    return replace(s, mamba_strategy="extra_buffer", overlap_schedule=True), env


def recommended_args(z: Sizing, rules: SglangRelease, shape: ModelShape) -> list[str]:
    """Flags to add or change (the engine's own spelling for this release)."""
    s = z.settings
    args = ["--mem-fraction-static", f"{s.mem_fraction_static:.2f}"]
    if shape.is_hybrid and s.max_mamba_cache_size is not None:
        args += ["--max-mamba-cache-size", str(s.max_mamba_cache_size)]
    args += ["--max-running-requests", str(z.max_running_requests)]
    if shape.is_hybrid and s.speculative_algorithm and not s.radix_cache_disabled:
        args += [rules.strategy_flag, s.mamba_strategy]
    return args


def speculative_note(spec_z: Sizing, plain_z: Sizing | None) -> str | None:
    """Say when speculative decoding likely costs more than it returns for bulk generation.

    Heuristic (incident.md's public anchors): Qwen3.6-27B on SGLang reaches ~790 output
    tok/s per H200 at 16 concurrent requests and ~1,350 per B200 at 1,024, so aggregate
    throughput keeps growing with concurrency, while an MTP draft's per-request gain
    (at most the accepted length, ~2-3x at low batch) shrinks toward 1x as the batch
    fills the GPU. When dropping speculation allows >= 2x the concurrent requests, the
    extra concurrency is likely to return more than the draft does.
    """
    if plain_z is None or not spec_z.settings.speculative_algorithm:
        return None
    spec_n, plain_n = spec_z.max_running_requests, plain_z.max_running_requests
    if plain_n < SPECULATIVE_CONCURRENCY_FACTOR * max(spec_n, 1):
        return None
    return (
        f"speculative decoding ({spec_z.settings.speculative_algorithm}) leaves {spec_n} "
        f"concurrent requests; without it the same GPU serves {plain_n} "
        f"(--mem-fraction-static {plain_z.settings.mem_fraction_static:.2f}). For offline bulk "
        "generation the extra concurrency likely returns more than the draft's per-request "
        "speedup, which shrinks as batches grow (public anchors for Qwen3.6-27B on SGLang: "
        "~790 tok/s per H200 at 16 concurrent, ~1,350 per B200 at 1,024). Measure both"
    )


STRATEGY_DESTS = ("mamba_scheduler_strategy", "mamba_radix_cache_strategy")


def _speculation_dest(dest: str) -> bool:
    """Speculative flags and the strategy they forced: dropped for the plain comparison, so the
    engine picks its own default strategy for a plain launch."""
    return dest.startswith("speculative_") or dest in STRATEGY_DESTS


def _memory_table(
    z: Sizing, shape: ModelShape, rules: SglangRelease, measured: dict[str, float]
) -> list[Term]:
    s = z.settings
    reserve_name = f"reserve: free x (1 - {s.mem_fraction_static:.3f})"
    if z.captured_terms:
        reserve_name = "headroom kept after graph capture"
    return [
        *_before_reserve(z, shape, rules, measured),
        Term(reserve_name, z.reserve_gib, "config"),
        *z.captured_terms,
        *_pools(z, shape),
        *z.reserve_terms,
    ]


def _before_reserve(
    z: Sizing, shape: ModelShape, rules: SglangRelease, measured: dict[str, float]
) -> list[Term]:
    """The memory table down to the reserve: free memory, weights, what the profile counts."""
    s = z.settings
    source = "measured"
    terms = [
        Term(
            "free before weights load",
            z.free_before_load_gib,
            source if "free_before_load_gib" in measured else "estimated",
        ),
        Term("target weights", z.weights_gib, source if "weights_gib" in measured else "estimated"),
    ]
    if rules.pre_profile_gib:
        terms.append(Term("allocated before the memory profile", rules.pre_profile_gib, "estimated"))
    if rope := q.rope_regrowth_gib(shape, s, rules):
        terms.append(Term("rotary cache regrown for the context length", rope, "estimated"))
    if s.has_draft_model and rules.draft_in_profile:
        terms.append(Term("draft weights (loaded before profiling)", z.draft_weights_gib, "estimated"))
        terms.append(
            Term(
                "draft's own embedding + LM head (loaded, freed after the pools)",
                z.freed_after_pools_gib,
                "estimated",
            )
        )
    return terms


def _pools(z: Sizing, shape: ModelShape) -> list[Term]:
    """The memory table's pools: the multimodal reservation, a hybrid's state, the KV cache."""
    terms: list[Term] = []
    if z.multimodal_reserve_gib:
        terms.append(Term("multimodal runtime reservation", z.multimodal_reserve_gib, "config"))
    if shape.is_hybrid:
        terms.append(Term(f"state pool: {z.pool.slots} slots", z.pool.state_gib, "config"))
        if z.pool.intermediate_gib:
            terms.append(
                Term(
                    f"speculative intermediate state ({z.settings.num_draft_tokens} draft tokens)",
                    z.pool.intermediate_gib,
                    "config",
                )
            )
    terms.append(Term(f"KV cache: {z.kv_tokens} tokens", z.kv_tokens * z.pool_cell_bytes / GIB, "config"))
    return terms


def planner_settings(spec: Spec, shape: ModelShape, args: EffectiveArgs) -> SglangSettings:
    """The sizing inputs of one launch: `args` are check's effective values for it."""
    return resolve_settings(
        args,
        shape,
        gpu_memory_gib=spec.gpu.memory_gib,
        weights_dtype=spec.model.dtype,
        quantization=spec.model.quantization,
        rules=release_rules(spec.engine.version),
    )


def _free_and_weights(
    spec: Spec, shape: ModelShape, settings: SglangSettings, facts: LogFacts | None
) -> tuple[float, float, dict[str, float]]:
    """(free before load GiB, target weights GiB, the measured inputs used).

    The spec's overrides win over a log's numbers, which win over the estimates; the
    draft's "mem usage" line is never used (see `plan_sglang`).
    """
    used_keys = ("free_before_load_gib", "weights_gib")
    # the log's two numbers reach the arithmetic through the spec (`calibrate_from_log` sets
    # them); the log's own record says which were measured, in the order it printed them
    logged = facts.measured_inputs() if facts is not None else {}
    measured_used = {key: value for key, value in logged.items() if key in used_keys}
    free = spec.gpu.free_before_load_gib
    if free is not None:
        measured_used["free_before_load_gib"] = free
    else:
        free = q.free_before_load_gib(spec.gpu.memory_gib, settings.tp_size)
    weights = spec.model.weights_gib
    if weights is not None:
        measured_used["weights_gib"] = weights
    else:
        weights = q.target_weights_gib(shape, settings)
    return free, weights, measured_used


def _recommendation(
    best: Sizing | None,
    problems: list[Problem],
    rules: SglangRelease,
    shape: ModelShape,
    env: dict[str, str],
) -> tuple[list[Problem], list[str], str]:
    """(problems with the recommendation as their fix, the recommended flags, the note saying
    what they give)."""
    if best is None:
        top = highest_fraction(rules.post_pool_fit)
        return (
            problems,
            [],
            f"no --mem-fraction-static from {top:.2f} down to 0.50 fits: use more GPUs (--tp)",
        )
    rec_args = recommended_args(best, rules, shape)
    verb = "fits with" if not problems else "starts with"
    transient = largest_transient(best)
    note = (
        f"{verb} {' '.join(rec_args)}: {best.kv_tokens} KV tokens, "
        f"{best.max_running_requests} concurrent requests, {best.margin_gib:.2f} GiB free after "
        f"the last startup allocation (largest: {transient.name}, {transient.gib:.2f} GiB)"
    )
    if best.fit is not None and best.extrapolating:
        note += f"; it keeps at least {best.required_margin_gib:.2f} GiB free: extrapolating (see below)"
    elif best.fit is not None:
        note += f"; it keeps at least {best.fit.stated_margin_gib:.2f} GiB free: {best.fit.margin_reason}"
    fixed = [replace(p, fix=Fix(args=tuple(rec_args), env=env)) for p in problems]
    return fixed, rec_args, note


#: algorithms whose drafter is a separate checkpoint the planner does not read
SEPARATE_DRAFTERS = frozenset({"DFLASH", "DSPARK"})


def _post_capture_note(spec: Spec, s: SglangSettings) -> str | None:
    """Whether the plan sized the pool after graph capture, as the variable asks."""
    if s.post_capture_kv_sizing:
        return (
            f"{POST_CAPTURE_ENV} is on: CUDA graphs and workspaces are allocated first and the KV "
            "pool is sized from what they leave, less the headroom (kv_pool_runtime.py)"
        )
    if env_bool(spec.engine.env, POST_CAPTURE_ENV, False):
        return (
            f"{POST_CAPTURE_ENV} is set but planned as off: the post-capture resize is modelled for "
            "SGLang 0.5.23 without MLA, decode context parallelism, memory saver, KV sharding or "
            "the unified memory pool"
        )
    return None


def _context_note(z: Sizing) -> str | None:
    """Say when the KV pool cannot hold one request of the full context length."""
    context_len = z.settings.context_len
    if not z.kv_tokens or z.kv_tokens >= context_len:
        return None
    return (
        f"{z.kv_tokens} KV tokens hold less than one {context_len}-token request "
        "(--context-length); long requests will wait or be retracted"
    )


def _state_copy_note(z: Sizing, shape: ModelShape) -> str | None:
    """Warn when a batch of cached-prefix requests can copy more SSM state at once than the
    startup leaves free (`q.mamba_cow_transient_gib`): the server starts, then dies serving."""
    transient = q.mamba_cow_transient_gib(shape, z.settings, z.max_running_requests)
    if transient <= max(z.margin_gib, 0.0):
        return None
    copies = q.mamba_cow_requests(z.settings, z.max_running_requests)
    per_state = transient / copies
    fitting = int(max(z.margin_gib, 0.0) // per_state)
    fix = (
        f"--prefill-max-requests {fitting} bounds it to {fitting * per_state:.2f} GiB"
        if fitting
        else "--disable-radix-cache avoids the copies"
    )
    return (
        f"warning: with the radix cache on, one prefill batch of {copies} requests that hit cached "
        f"prefixes copies their SSM states at once ({per_state * 1024:.0f} MiB each, "
        f"{transient:.2f} GiB) against {z.margin_gib:.2f} GiB left after startup: CUDA out of memory while "
        f"serving, not at start. {fix}"
    )


def range_note(z: Sizing, version: str) -> str | None:
    """Which margin the plan keeps, and why: inside the fit's measured range its stated margin,
    outside it ("extrapolating") the larger one; nothing to say without a fit."""
    fit = z.fit
    if fit is None or fit.valid is None:
        return None
    if not z.extrapolating:
        return (
            f"inside the measured range of SGLang {version}'s post-pool fit ({fit.valid}): "
            f"{fit.stated_margin_gib:.2f} GiB margin"
        )
    return (
        f"extrapolating: {', '.join(z.extrapolating)} outside the measured range of SGLang {version}'s "
        f"post-pool fit ({fit.valid}); the fitted graph sizes are kept and the plan asks "
        f"{z.required_margin_gib:.2f} GiB margin instead of {fit.stated_margin_gib:.2f} ({fit.source})"
    )


def _releases(rules: SglangRelease) -> str:
    return rules.first if rules.first == rules.last else f"{rules.first}-{rules.last}"


def _fraction_for_free_gib(z: Sizing, more_free_gib: float) -> float:
    """The --mem-fraction-static that leaves `more_free_gib` more free after the pools."""
    steps = -(-more_free_gib // (z.free_before_load_gib * FRACTION_STEP))
    return round(z.settings.mem_fraction_static - steps * FRACTION_STEP, 2)


def _gate_applies(z: Sizing, rules: SglangRelease) -> bool:
    """Whether the release's gate reads this configuration: a gate, a graph it would capture,
    a backend the engine chose itself, and pools that fit."""
    s = z.settings
    return bool(
        rules.prefill_graph_gate_gib
        and z.captured_prefill_tokens
        and not s.prefill_backend_explicit
        and z.rest_gib > 0
    )


def gate_note(z: Sizing, shape: ModelShape, rules: SglangRelease) -> str | None:
    """The release's prefill-graph gate in the open: which side of it the free memory at the
    capture's start lands, when within `GATE_BAND_GIB`, or below it; and what moves it. The
    verdict always counts the graph: the plan's free memory is itself an estimate."""
    gate = rules.prefill_graph_gate_gib
    s = z.settings
    if not _gate_applies(z, rules):
        return None
    free = z.free_at_prefill_capture_gib
    if free >= gate + GATE_BAND_GIB:
        return None
    prefix = (
        f"prefill graph gate (SGLang {_releases(rules)} skips an auto-selected prefill CUDA graph "
        f"when less than {gate:.2f} GiB is free as its capture begins): the plan has {free:.2f} GiB there, "
    )
    above = _fraction_for_free_gib(z, gate + GATE_BAND_GIB - free)
    if free < gate:
        return (
            prefix + "below the gate: the engine will likely skip the graph and prefill eagerly (slower "
            "prefill; bench measures it); the verdict still counts the graph. "
            f"--mem-fraction-static {above:.2f} puts it {GATE_BAND_GIB:.0f} GiB above the gate "
            "(graph captured)"
        )
    chunk = s.chunked_prefill_size
    half = replace(s, chunked_prefill_size=max(chunk // 2, 1), prefill_graph_max_tokens=max(chunk // 2, 1))
    graph = sum(t.gib for t in z.reserve_terms if t.name.startswith(PREFILL_GRAPH_TERM))
    smaller = q.captured_prefill_tokens(half, rules, z.max_running_requests)
    shrink = graph * (1 - smaller / max(z.captured_prefill_tokens, 1))
    return (
        prefix + f"within {GATE_BAND_GIB:.0f} GiB above the gate: the graph is captured and any "
        "under-count is an out-of-memory in its capture. What moves it: "
        f"--chunked-prefill-size {chunk // 2} (the graph keeps about {shrink:.2f} GiB less), "
        f"--mem-fraction-static {above:.2f} ({GATE_BAND_GIB:.0f} GiB more room), or "
        f"--max-running-requests {max(z.max_running_requests - 1, 1)} (one less request)"
    )


#: the flag every gated release (0.5.16, 0.5.17) reads to run prefill eagerly: the gate's other
#: side chosen, its graph's room given to the pools (tests/plan check each gated release has it)
PREFILL_GRAPH_OFF_FLAG = "--disable-prefill-cuda-graph"
#: fraction steps below the gate note's fraction tried for a point that keeps the graph
GATE_SEARCH_STEPS = 10


def prefill_gate(
    z: Sizing, shape: ModelShape, rules: SglangRelease, free: float, weights: float
) -> PrefillGate | None:
    """`gate_note`'s verdict as data, for bench's prefill-graph axis. Below the gate, the other
    side is the same configuration at the highest fraction that puts the capture's free memory
    `GATE_BAND_GIB` above it (the graph kept, less KV), sized as the recommendation sizes it;
    within the band above, the graph turned off (`PREFILL_GRAPH_OFF_FLAG`; the plan then gives
    its room to the pools). None where the gate does not apply."""
    if not _gate_applies(z, rules):
        return None
    gate, here = rules.prefill_graph_gate_gib, z.free_at_prefill_capture_gib
    kept = here >= gate
    found = PrefillGate(gate, round(here, 3), kept, near=here < gate + GATE_BAND_GIB)
    if not found.near:
        return found
    if kept:
        return replace(
            found,
            other_side_args=(PREFILL_GRAPH_OFF_FLAG,),
            replan=True,
            other_side=f"prefill eager ({PREFILL_GRAPH_OFF_FLAG}: its graph's room goes to KV)",
        )
    start = _fraction_for_free_gib(z, gate + GATE_BAND_GIB - here)
    for fraction in _fraction_candidates(start)[:GATE_SEARCH_STEPS]:
        other = _sized_at(shape, replace(z.settings, mem_fraction_static=fraction), rules, free, weights)
        if other is not None and other.free_at_prefill_capture_gib >= gate + GATE_BAND_GIB:
            return replace(
                found,
                other_side_args=tuple(recommended_args(other, rules, shape)),
                other_side=(
                    f"prefill graph kept (--mem-fraction-static {fraction:.2f}: "
                    f"{other.free_at_prefill_capture_gib:.2f} GiB free at its capture, "
                    f"{other.kv_tokens:,} KV tokens, {other.max_running_requests} requests)"
                ),
            )
    return replace(found, other_side=f"no fraction from {start:.2f} down fits with the graph kept")


def _sized_at(
    shape: ModelShape, s: SglangSettings, rules: SglangRelease, free: float, weights: float
) -> Sizing | None:
    """The recommendation's sizing at `s`'s fraction (hybrid: its best state split), None when
    it does not fit there."""
    if shape.is_hybrid:
        return _best_state_split(shape, s, rules, free, weights)
    z = size(
        shape, replace(s, max_running_requests=None), rules, free_before_load_gib=free, weights_gib=weights
    )
    return z if _fits_with_margin(z, shape) and z.kv_tokens >= _long_request_tokens(s) else None


#: the smallest chunk the capture rule halves to (SGLang's smallest default chunk)
MIN_CHUNK_TOKENS = 2048


def capture_oom_fix(chunked_prefill_size: int) -> list[str]:
    """The capture rule's flags: halve the chunk, which the capture's largest size follows
    (`gate_note`'s first move); none at or below `MIN_CHUNK_TOKENS`."""
    chunk = max(chunked_prefill_size // 2, MIN_CHUNK_TOKENS)
    if chunk >= chunked_prefill_size:
        return []
    return ["--chunked-prefill-size", str(chunk)]


def capture_oom_replan(log_text: str, plan: Plan) -> tuple[list[str], str] | None:
    """`up --replan`'s rule for a start that ran out of memory capturing the prefill CUDA graph
    while the plan, given the engine's numbers, still recommends what ran: the flags that move
    the capture (`capture_oom_fix`) and why; None for any other failure."""
    if not prefill_capture_oom(log_text) or not isinstance(plan.details, SglangDetails):
        return None
    extra = capture_oom_fix(plan.details.chunked_prefill_size_tokens)
    if not extra:
        return None
    return extra, (
        "the engine ran out of memory capturing the prefill CUDA graph, which the plan said "
        f"fits: {' '.join(extra)} halves what the capture keeps"
    )


def _details(z: Sizing, shape: ModelShape, free: float) -> SglangDetails:
    """The effective values behind the plan that the engine also logs."""
    s = z.settings
    return SglangDetails(
        context_len_tokens=s.context_len,
        page_size_tokens=s.page_size,
        mamba_strategy=s.mamba_strategy if shape.is_hybrid else None,
        overlap_schedule=s.overlap_schedule,
        state_slots_per_request=q.state_slots_per_request(s) if shape.is_hybrid else 0,
        speculative_num_draft_tokens=s.num_draft_tokens,
        mem_fraction_static_given=s.mem_fraction_given,
        chunked_prefill_size_tokens=s.chunked_prefill_size,
        cuda_graph_max_batch_size=s.cuda_graph_max_bs,
        free_before_load_gib=round(free, 3),
        margin_gib=round(z.margin_gib, 3),
        largest_transient=largest_transient(z).name,
    )


def plan_sglang(spec: Spec, shape: ModelShape, args: EffectiveArgs, facts: LogFacts | None = None) -> Plan:
    """The SGLang memory plan for a spec.

    `facts` is what an earlier start's log printed (`parse_sglang_log`). Free memory
    before load and target weights are used (they also arrive through the spec's override
    keys). The draft's "mem usage" line is not: it is taken before the draft swaps its own
    embedding and LM head for the target's, so it is not the draft's resident size.
    """
    rules = release_rules(spec.engine.version)
    settings = planner_settings(spec, shape, args)
    free, weights, measured_used = _free_and_weights(spec, shape, settings, facts)
    z = size(shape, settings, rules, free_before_load_gib=free, weights_gib=weights)
    startable, rec_env = startable_settings(settings, shape, rules)
    best = recommend(shape, startable, rules, free, weights)
    problems, rec_args, rec_note = _recommendation(best, blocking_problems(z, shape), rules, shape, rec_env)
    notes = [rec_note, *_notes(spec, shape, args, z, best, rules, free, weights)]
    return Plan(
        engine=spec.engine.name,
        engine_version=spec.engine.version,
        fits=not problems,
        weights_gib=weights,
        kv_bytes_per_token=z.kv_bytes_per_token,
        kv_tokens=z.kv_tokens,
        state_bytes_per_request=z.state_bytes_per_request,
        state_slots=z.pool.slots,
        max_running_requests=z.max_running_requests,
        memory_fraction=settings.mem_fraction_static,
        reserve_gib=z.reserve_gib,
        reserve_needed_gib=z.reserve_needed_gib,
        problems=problems,
        recommended_args=rec_args,
        recommended_env=rec_env if best is not None else {},
        terms=_memory_table(z, shape, rules, measured_used),
        measured=measured_used,
        notes=notes,
        details=_details(z, shape, free),
        prefill_gate=prefill_gate(z, shape, rules, free, weights),
    )


def _notes(
    spec: Spec,
    shape: ModelShape,
    args: EffectiveArgs,
    z: Sizing,
    best: Sizing | None,
    rules: SglangRelease,
    free: float,
    weights: float,
) -> list[str]:
    """What the plan says beside its recommendation, in this order."""
    settings = z.settings
    notes = [
        _speculative_cost_note(spec, shape, args, z, best, rules, free, weights),
        _context_note(z),
        _separate_drafter_note(settings.speculative_algorithm),
        _post_capture_note(spec, settings),
        _state_copy_note(z, shape),
        range_note(z, spec.engine.version),
        gate_note(z, shape, rules),
    ]
    return [note for note in notes if note]


def _speculative_cost_note(
    spec: Spec,
    shape: ModelShape,
    args: EffectiveArgs,
    z: Sizing,
    best: Sizing | None,
    rules: SglangRelease,
    free: float,
    weights: float,
) -> str | None:
    """`speculative_note` for the recommendation (else the plan as given) against the best
    plain launch; None without speculative decoding."""
    if not z.settings.speculative_algorithm:
        return None
    plain = planner_settings(spec, shape, effective_args_without(spec, shape, args, _speculation_dest))
    return speculative_note(best or z, recommend(shape, plain, rules, free, weights))


def _separate_drafter_note(algorithm: str | None) -> str | None:
    if algorithm not in SEPARATE_DRAFTERS:
        return None
    return (
        f"{algorithm}'s drafter is its own checkpoint "
        "(--speculative-draft-model-path): its weights and KV layers are not read, so they are "
        "planned as the target's MTP layers; calibrate with --from-log"
    )


def refuse_other_sglang_footprint(
    spec: Spec, shape: ModelShape, args: EffectiveArgs, facts: LogFacts
) -> None:
    """SGLang prints the target's K cache size and token count: K bytes per token per GPU."""
    dtype, tokens, k_gib = facts.kv_dtype, facts.kv_tokens, facts.k_cache_gib
    # MLA caches a latent, and sliding-window layers get their own smaller pool: skipped
    if shape.kv_lora_rank or shape.sliding_attention_layers:
        return
    if dtype is None or tokens is None or k_gib is None:
        return
    if dtype not in DTYPE_BYTES or not tokens or not k_gib:
        return
    s = planner_settings(spec, shape, args)
    heads = layer_specs(shape).full_attention.kv_heads_per_gpu(s.tp_size)
    planned = shape.full_attention_layers * heads * shape.head_dim * DTYPE_BYTES[dtype]
    refuse_footprint(spec, shape, k_gib * GIB / tokens, planned, "K cache")
