"""The bench's parts on their own: the steady-state window, the sample, the variants'
flags, the streamed answer, and the projection arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specpilot.bench.client import RequestTiming, _Stream
from specpilot.bench.lab import axis_notes, run_name
from specpilot.bench.measure import _first_row
from specpilot.bench.sample import draw, prompt_chars, write_prompts
from specpilot.bench.steady import percentiles_ms, steady_window, tokens_in_window
from specpilot.bench.variants import (
    Variant,
    default_variants,
    measured_label,
    parse_variants,
    prepare,
    spec_method,
    variant_of,
    variant_spec,
)
from specpilot.check.resolved import release_of
from specpilot.errors import UserError
from specpilot.generate.dispatch.client import RequestFailed
from specpilot.generate.rows.inputs import iter_rows, resolve_input
from specpilot.generate.rows.types import Answer, PromptRow
from specpilot.launch.state import check_run_name
from specpilot.projection import Rates, project, read_bench, wall_text
from specpilot.spec import parse_spec
from tests.bench.conftest import SPECULATIVE_ARGS
from tests.bench.conftest import write_prompts as write_prompt_file


def _timing(start_s: float, latency_s: float, tokens: int, chunks: int) -> RequestTiming:
    gap_s = latency_s / chunks
    return RequestTiming(start_s, latency_s, gap_s, (gap_s,) * (chunks - 1), tokens, "stop")


def test_the_window_is_the_longest_span_at_or_above_ninety_percent_of_peak() -> None:
    # ten requests start at 0; one ends at 1 (9 left: ceil(0.9 x 10) = 9 still counts), the next at 2
    # (a chunk every 0.25 s: the sums below are exact in binary)
    requests = [_timing(0.0, 1.0, 10, 4), _timing(0.0, 2.0, 20, 8)] + [_timing(0.0, 5.0, 50, 20)] * 8
    window = steady_window(requests)
    assert window is not None
    assert (window.start_s, window.end_s, window.threshold, window.peak) == (0.0, 2.0, 9, 10)
    # all of the first two requests' chunks and 2/5 of the others' fall inside [0, 2]
    assert tokens_in_window(requests, window) == pytest.approx(10 + 20 + 8 * 50 * 8 / 20)


def test_ramp_up_and_drain_are_left_out() -> None:
    # a staggered start (one request a second) then a plateau of 4, then a drain
    requests = [_timing(float(i), 10.0 - i, 100, 10) for i in range(4)]
    window = steady_window(requests)
    assert window is not None and (window.start_s, window.end_s) == (3.0, 10.0)
    assert steady_window([]) is None


def test_percentiles_are_nearest_rank_in_milliseconds() -> None:
    assert percentiles_ms([i / 1000 for i in range(1, 101)]) == {"p50": 50.0, "p90": 90.0, "p99": 99.0}
    assert percentiles_ms([]) is None


def test_the_sample_is_stratified_seeded_and_keeps_the_longest_row(tmp_path: Path) -> None:
    source = resolve_input(write_prompt_file(tmp_path / "p.jsonl", 300))
    rows = [r for r in iter_rows(source) if isinstance(r, PromptRow)]
    longest = max(rows, key=prompt_chars)
    first, again, other = draw(source, 20, seed=5), draw(source, 20, seed=5), draw(source, 20, seed=6)
    assert [r.row_id for r in first.rows] == [r.row_id for r in again.rows]
    assert [r.row_id for r in first.rows] != [r.row_id for r in other.rows]
    assert longest.row_id in {r.row_id for r in first.rows}
    # one row from each twentieth of the rows sorted by length
    ranks = sorted(sorted(rows, key=lambda r: (prompt_chars(r), r.position)).index(r) for r in first.rows)
    assert [rank // 15 for rank in ranks] == list(range(20))
    assert first.input_rows == 300


def test_the_sample_file_reads_back_as_the_same_prompts(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(
        json.dumps({"id": "a", "messages": [{"role": "user", "content": "one"},
                    {"role": "assistant", "content": "x"}, {"role": "user", "content": "two"}]}) + "\n"
    )  # fmt: skip
    rows = [r for r in iter_rows(resolve_input(path)) if isinstance(r, PromptRow)]
    write_prompts(rows, tmp_path / "out.jsonl")
    again = [r for r in iter_rows(resolve_input(tmp_path / "out.jsonl")) if isinstance(r, PromptRow)]
    assert [(r.row_id, r.segments) for r in again] == [(r.row_id, r.segments) for r in rows]


def _spec(engine: str, args: list[str]) -> object:
    version = "0.5.13" if engine == "sglang" else "0.26.0"
    return parse_spec(
        {"name": "s", "model": {"path": "m"}, "gpu": {"memory_gib": 80},
         "engine": {"name": engine, "version": version, "args": args}}
    )  # fmt: skip


def test_k_draft_tokens_are_written_as_each_engine_counts_them() -> None:
    sglang = _spec("sglang", SPECULATIVE_ARGS)
    on = release_of(sglang)  # type: ignore[arg-type]
    assert spec_method(sglang, on) == "NEXTN"  # type: ignore[arg-type]
    # the release's flag table has --speculative-adaptive: the deepest variant adaptive too
    labels = [v.label for v in default_variants(sglang, on)]  # type: ignore[arg-type]
    assert labels == ["plain", "NEXTN-1", "NEXTN-2", "NEXTN-3", "NEXTN-3-adaptive"]
    adaptive = variant_spec(sglang, on, Variant("NEXTN", 3, adaptive=True), "s-a")  # type: ignore[arg-type]
    assert adaptive.engine.args.count("--speculative-adaptive") == 1
    assert parse_variants("NEXTN:3:adaptive", on.engine) == [Variant("NEXTN", 3, adaptive=True)]
    with pytest.raises(UserError, match="'fast' is not a mode"):
        parse_variants("NEXTN:3:fast", on.engine)
    assert Variant("NEXTN", 3, adaptive=True).at(21).label == "NEXTN-3-adaptive@21"
    two = variant_spec(sglang, on, Variant("NEXTN", 2), "s-2")  # type: ignore[arg-type]
    args = two.engine.args
    assert args[args.index("--speculative-num-steps") + 1] == "2"
    assert args[args.index("--speculative-num-draft-tokens") + 1] == "3"  # SGLang counts the root token
    assert args.count("--speculative-num-steps") == 1 and "--mamba-scheduler-strategy" in args
    plain = variant_spec(sglang, on, Variant(), "s-plain")  # type: ignore[arg-type]
    assert not any(a.startswith("--speculative") for a in plain.engine.args)
    vllm = _spec("vllm", ["--speculative-config", '{"method": "qwen3_5_mtp", "num_speculative_tokens": 3}'])
    vllm_on = release_of(vllm)  # type: ignore[arg-type]
    one = variant_spec(vllm, vllm_on, Variant("qwen3_5_mtp", 1), "v-1")  # type: ignore[arg-type]
    config = json.loads(one.engine.args[one.engine.args.index("--speculative-config") + 1])
    assert config == {"method": "qwen3_5_mtp", "num_speculative_tokens": 1}
    assert parse_variants("plain, nextn:1,NEXTN:1", on.engine) == [Variant(), Variant("NEXTN", 1)]
    with pytest.raises(UserError, match="not a speculative method of vllm"):
        parse_variants("NEXTN:1", vllm_on.engine)


def test_a_stream_becomes_the_answer_a_plain_call_gives() -> None:
    stream = _Stream()
    stream.feed({"choices": [{"delta": {"reasoning_content": "think "}}]}, 1.0)
    stream.feed({"choices": [{"delta": {"content": "an"}}]}, 1.5)
    stream.feed({"choices": [{"delta": {"content": "swer"}, "finish_reason": "stop"}]}, 2.0)
    stream.feed({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 5}}, 2.1)
    answer = stream.answer()
    assert (answer.content, answer.reasoning, answer.finish_reason) == ("answer", "think ", "stop")
    assert (answer.prompt_tokens, answer.completion_tokens) == (7, 5)
    assert stream.chunk_times_s == [1.0, 1.5, 2.0]
    with pytest.raises(RequestFailed, match="stream ended with an error"):
        _Stream().feed({"error": {"message": "boom"}}, 0.0)


@pytest.mark.parametrize("count", ["²", "٣", "0", "17", "", "x"])
def test_a_draft_count_that_is_no_ascii_number_is_refused(count: str) -> None:
    """A Unicode digit passes str.isdigit(): it once reached int() and crashed."""
    with pytest.raises(UserError, match="gives no draft-token count from 1 to 16") as refused:
        parse_variants(f"NEXTN:{count}", release_of(_spec("sglang", SPECULATIVE_ARGS)).engine)  # type: ignore[arg-type]
    assert refused.value.field == "--variants"


def test_a_stream_with_a_lone_surrogate_or_a_huge_count_is_a_malformed_answer() -> None:
    surrogate = _Stream()
    surrogate.feed({"choices": [{"delta": {"content": "bad \ud800 text"}, "finish_reason": "stop"}]}, 1.0)
    with pytest.raises(RequestFailed, match="lone surrogate"):
        surrogate.answer()
    huge = _Stream()
    huge.feed({"choices": [{"delta": {"content": "ok"}, "finish_reason": "stop"}]}, 1.0)
    huge.feed({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 10**20}}, 1.1)
    with pytest.raises(RequestFailed, match="more than any answer holds"):
        huge.answer()
    bare = _Stream()
    bare.feed({"choices": [{"delta": {"content": "ok"}, "finish_reason": "stop"}]}, 1.0)
    assert bare.answer().usage_missing and not stream_with_usage().usage_missing


def stream_with_usage() -> Answer:
    stream = _Stream()
    stream.feed({"choices": [{"delta": {"content": "ok"}, "finish_reason": "stop"}]}, 1.0)
    stream.feed({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 1}}, 1.1)
    return stream.answer()


def test_the_projection_divides_wall_time_but_not_gpu_hours() -> None:
    rates = Rates(output_tokens_per_s=1000.0, mean_output_tokens=3600.0, gpus_per_server=2, source="x")
    one = project(10_000, rates)
    assert one.servers == 1 and (one.gpu_hours, one.wall_s) == pytest.approx((20.0, 36_000.0))
    # only a mean and a rate: no tail is modelled, and the line says so
    assert one.tail_s is None and one.rests_on == "x; no tail modelled: no bench sample's output lengths"
    eight = project(10_000, rates, gpus=8)
    assert eight.servers == 4 and (eight.gpu_hours, eight.wall_s) == pytest.approx((20.0, 9_000.0))
    assert wall_text(9_000.0) == "2h30m" and wall_text(36_000 * 3) == "1d06h" and wall_text(42) == "42s"
    with pytest.raises(UserError, match="--gpus"):
        project(1, rates, gpus=1)


def test_a_job_folder_without_a_bench_result_projects_nothing(tmp_path: Path) -> None:
    assert read_bench(tmp_path) is None
    (tmp_path / "bench.json").write_text("{broken")
    with pytest.raises(UserError, match="cannot be read as a bench result"):
        read_bench(tmp_path)


def test_a_server_that_ignores_stream_is_named_in_the_variant_row() -> None:
    """A server answering one JSON body to `"stream": true` (no `data:` events) fails the
    request saying so, and a variant with no answer carries that reason, not just
    "no request was answered"."""
    import asyncio

    from aiohttp import web

    from specpilot.bench.client import StreamingChatClient, TimingLog
    from specpilot.bench.measure import Measured, _fill
    from specpilot.generate.dispatch.client import open_session
    from specpilot.generate.sampling import Sampling
    from tests.generate.conftest import scripted_server

    async def plain(request: web.Request) -> web.Response:
        answer = {"role": "assistant", "content": "ok"}
        return web.json_response({"choices": [{"message": answer, "finish_reason": "stop"}]})

    log = TimingLog()

    async def ask(port: int) -> None:
        async with open_session(2) as session:
            client = StreamingChatClient(session, "m", Sampling(thinking=True), log)
            await client.complete(f"http://127.0.0.1:{port}", [{"role": "user", "content": "hi"}])

    with scripted_server(plain) as port, pytest.raises(RequestFailed, match='ignores "stream": true'):
        asyncio.run(ask(port))
    row = Measured(label="plain", status="measured", reason=None, argv=[], recommended_args=[])
    _fill(row, log, 1.0)
    assert row.status == "failed" and row.reason is not None
    assert row.reason.startswith("no request was answered (the last error: ") and "stream" in row.reason


def test_a_release_without_adaptive_speculation_says_so_per_axis() -> None:
    old = parse_spec(
        {"name": "s", "model": {"path": "m"}, "gpu": {"memory_gib": 80},
         "engine": {"name": "sglang", "version": "0.5.10.post1", "args": SPECULATIVE_ARGS}}
    )  # fmt: skip
    on = release_of(old)
    assert [v.label for v in default_variants(old, on)] == ["plain", "NEXTN-1", "NEXTN-2", "NEXTN-3"]
    notes = axis_notes(old, on, default_variants(old, on), host_gpus=1, gates={Variant(): None})
    assert "adaptive speculation: not explored (SGLang 0.5.10.post1 has no --speculative-adaptive)" in notes
    assert "layout: one GPU (one engine: no layout to compare)" in notes
    assert any(
        n.startswith("prefill CUDA graph on/off: not explored (no configuration's plan") for n in notes
    )
    refused = prepare(old, on, Variant("NEXTN", 3, adaptive=True), "s-a")
    assert refused.plan is None and refused.refused == "SGLang 0.5.10.post1 has no adaptive speculation"
    vllm = _spec("vllm", ["--speculative-config", '{"method": "qwen3_5_mtp", "num_speculative_tokens": 3}'])
    vllm_on = release_of(vllm)  # type: ignore[arg-type]
    assert "adaptive speculation: not explored (vLLM 0.26.0 has no adaptive speculation)" in axis_notes(
        vllm,  # type: ignore[arg-type]
        vllm_on,
        default_variants(vllm, vllm_on),  # type: ignore[arg-type]
        host_gpus=4,
        gates={},
    )


def test_a_point_refused_for_a_mistyped_secret_flag_keeps_its_value_out_of_its_row() -> None:
    """`--api-ky KEY`: check's fix moves KEY onto --api-key, so KEY is a secret; the refused
    point's row (its argv, in bench.json and --json) held it, as no secret flag named it."""
    key = "sk-SECRET123"
    spec = parse_spec(
        {"name": "s", "model": {"path": "m"}, "gpu": {"memory_gib": 80},
         "engine": {"name": "sglang", "version": "0.5.13", "args": [*SPECULATIVE_ARGS, "--api-ky", key]}}
    )  # fmt: skip
    row = _first_row(prepare(spec, release_of(spec), Variant(), "s-plain"))
    assert row.status == "refused" and row.reason is not None and "flag-unknown" in row.reason
    assert "--api-ky" in row.argv and key not in json.dumps(row.to_json())


def test_block_drafters_write_their_k_as_their_handlers_require() -> None:
    """DFLASH's k is its block, DSPARK's its gamma: 0.5.23's check accepts both as written."""
    from specpilot.check import check_args

    draft = ["--speculative-draft-model-path", "/models/drafter"]
    spec = parse_spec(
        {"name": "s", "model": {"path": "m"}, "gpu": {"memory_gib": 80},
         "engine": {"name": "sglang", "version": "0.5.23", "args": ["--speculative-algorithm", "NEXTN", *draft]}}
    )  # fmt: skip
    on = release_of(spec)
    dflash = variant_spec(spec, on, Variant("DFLASH", 16), "s-d").engine.args
    dspark = variant_spec(spec, on, Variant("DSPARK", 5), "s-s").engine.args
    assert dflash[dflash.index("--speculative-num-draft-tokens") + 1] == "16"
    assert dflash[dflash.index("--speculative-num-steps") + 1] == "1"
    assert dspark[dspark.index("--speculative-dspark-block-size") + 1] == "5"
    assert dspark[dspark.index("--speculative-num-draft-tokens") + 1] == "6"
    for args, k in ((dflash, 16), (dspark, 5)):
        result = check_args("sglang", "0.5.23", args, {}, "Qwen3ForCausalLM")
        assert result.ok, [f.message for f in result.findings if f.severity == "error"]
        again = spec.model_copy(update={"engine": spec.engine.model_copy(update={"args": args})})
        assert variant_of(again, on).draft_tokens == k  # read back as written


def test_a_spec_is_found_among_the_bench_points() -> None:
    """`plan --job` projects the spec itself: its own cap where it sets one, else its
    configuration at the largest cap measured (the plan's maximum it runs at)."""
    labels = ["plain@57", "plain@29", "NEXTN-3@21", "NEXTN-3@11"]
    spec = _spec("sglang", SPECULATIVE_ARGS)
    on = release_of(spec)  # type: ignore[arg-type]
    assert measured_label(spec, on, labels) == "NEXTN-3@21"  # type: ignore[arg-type]
    capped = _spec("sglang", [*SPECULATIVE_ARGS, "--max-running-requests", "11"])
    assert measured_label(capped, on, labels) == "NEXTN-3@11"  # type: ignore[arg-type]
    other = _spec("sglang", [*SPECULATIVE_ARGS, "--max-running-requests", "12"])
    assert measured_label(other, on, labels) is None  # type: ignore[arg-type]
    assert measured_label(spec, on, ["plain", "NEXTN-3"]) == "NEXTN-3"  # type: ignore[arg-type]


def test_long_run_names_stay_unique_and_usable() -> None:
    """Run names were cut at 64 characters: two variants of a long spec name shared one run."""
    spec = parse_spec(
        {"name": "a-spec-name-long-enough-that-its-bench-runs-pass-the-limit-x", "model": {"path": "m"},
         "gpu": {"memory_gib": 80},
         "engine": {"name": "sglang", "version": "0.5.13", "args": list(SPECULATIVE_ARGS)}}
    )  # fmt: skip
    points = [Variant("NEXTN", 2), Variant("NEXTN", 3), Variant("NEXTN", 3).at(8), Variant("NEXTN", 3).at(16)]
    names = [run_name(spec, point) for point in points]  # type: ignore[arg-type]
    assert len(set(names)) == len(points), names
    for name in names:
        assert len(name) <= 64 and name.startswith("a-spec-name-long-enough")
        check_run_name(name)
        variant_spec(spec, release_of(spec), Variant("NEXTN", 2), name)  # a spec's name too
    assert run_name(spec.model_copy(update={"name": "s"}), points[0]) == "s-bench-nextn-2"  # type: ignore[arg-type]
