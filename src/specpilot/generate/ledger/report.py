"""The job summary, computed from the ledger alone: at the end of `generate` and by `report`.

Reading only the ledger (read-only SQLite in WAL mode) makes `specpilot report DIR`
safe while a job is writing: it sees the last committed batch, never a torn state.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

from rich.console import Console
from rich.table import Table

from specpilot.errors import UserError
from specpilot.generate.ledger.disk import disk_error
from specpilot.generate.ledger.lock import is_held
from specpilot.generate.ledger.store import LEDGER_FILE, Ledger, RowState
from specpilot.generate.rows.validate import FLAG_NAMES
from specpilot.generate.yields import CAUSE_NAMES, primary_cause

#: the rates' window (`summarize`): rows finished in the last minute
RATE_WINDOW_S = 60.0
#: ledger meta: when the last run of the job ended (the rates' window of a job that ended ends there)
RUN_ENDED_KEY = "run_ended_at"


def eta_text(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def open_for_report(directory: Path) -> Ledger:
    if not (directory / LEDGER_FILE).exists():
        raise UserError(
            f"{directory} has no {LEDGER_FILE}",
            field="DIR",
            fix="pass the --output directory of a `specpilot generate` job",
        )
    return Ledger.in_dir(directory, readonly=True)


@contextmanager
def reading_ledger(directory: Path) -> Iterator[Ledger]:
    """The job's ledger, read-only and closed after; a damaged one is one line naming it."""
    try:
        ledger = open_for_report(directory)
        try:
            yield ledger
        finally:
            ledger.close()
    except OSError as err:
        fix = "check the folder is there and readable"
        raise disk_error(err, directory, field="DIR", elsewhere=fix, writing=False) from None
    except sqlite3.DatabaseError as err:
        raise UserError(
            f"the ledger in {directory} cannot be read ({err})",
            field="DIR",
            fix="restore the folder from a backup; the rows themselves are in its data/ folder",
        ) from None


#: the ledger's meta key for the largest clock jump the job saw (seconds, signed)
CLOCK_JUMP_KEY = "clock_jump_s"

#: keys `to_json` leaves out when unset (the other commands' summaries have no such part)
_ABSENT_UNSET = ("this_run_servers", "lengths", "clock_jump_s", "exports")


@dataclass(frozen=True)
class ServerRun:
    """One server's part in this run of `generate`."""

    server: str
    rows_done: int
    taken_out: int


@dataclass(frozen=True)
class JobSummary:
    """Counts, tokens, flags, rates and ETA of a job, from its ledger (`to_json` for --json)."""

    total: int
    pending: int
    in_flight: int
    done: int
    failed: int
    clean: int
    flagged: int
    rejected: int
    state: Literal["finished", "incomplete"]
    prompt_tokens: int
    completion_tokens: int
    retries: int
    flags: dict[str, int]
    rows_per_s: float  # over the last `rate_window_s`
    output_tokens_per_s: float
    eta_s: float | None
    elapsed_s: float | None  # job start to its last finished row
    rows_per_s_overall: float | None
    output_tokens_per_s_overall: float | None
    spec_accept_length: float | None
    model: str | None
    thinking: bool
    servers: list[str]
    input: str | None
    #: the rates' window: the last RATE_WINDOW_S ending now, shorter only while this run is younger
    rate_window_s: float = RATE_WINDOW_S
    this_run_servers: list[ServerRun] | None = None  # generate's summary only
    lengths: dict[str, dict[str, Any]] | None = None  # report --max-length only, per split
    #: the system clock jumped this far while the job ran: elapsed_s and overall rates are off by it
    clock_jump_s: float | None = None
    #: what eta_s rests on: the rate window's rows per second alone (no tail), or the rows
    #: left played in waves with their tail (`generate.eta.projected_eta`)
    eta_basis: str | None = None
    #: the flagged rows by the one cause each counts under (`generate.yields.CAUSES`)
    by_cause: dict[str, int] | None = None
    #: output tokens of the flagged rows (what `job` counts as spent on rows left out)
    flagged_completion_tokens: int = 0
    #: rows in each export a job wrote (`job`'s record; None outside a job's folder)
    exports: dict[str, int] | None = None

    @property
    def clean_share(self) -> float | None:
        """Clean rows over rows done (None before any)."""
        return self.clean / self.done if self.done else None

    def counts_text(self) -> str:
        """`C clean, F flagged (by cause), X failed`: what the dataset holds and what it lost."""
        causes = ", ".join(f"{n:,} {name}" for name, n in (self.by_cause or {}).items() if n)
        return (
            f"{self.clean:,} clean, {self.flagged:,} flagged{f' ({causes})' if causes else ''}, "
            f"{self.failed:,} failed"
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON object `generate --json` and `report --json` print (parts absent when unset)."""
        return {
            key: value for key, value in asdict(self).items() if value is not None or key not in _ABSENT_UNSET
        }


def _int(value: object) -> int:
    """An integer column of a SQLite aggregate (None over no rows)."""
    return int(str(value or 0))


def summarize(ledger: Ledger, *, now: float | None = None, running: bool | None = None) -> JobSummary:
    """The job's summary from its ledger alone: what the page, `/metrics`, `report` and the
    progress line all show.

    `running` (None: whether a `generate` holds the folder's lock now) decides what rows the
    ledger marks in flight are: out now while a job runs, else waiting to be sent again by
    the next run (pending). The rates count the rows finished within a window of fixed
    length ending at `now` (RATE_WINDOW_S, or this run's age if it is younger), so rows
    that finish in waves move it no more than they move the truth."""
    now = time.time() if now is None else now
    if running is None:
        running = is_held(ledger.path.parent)
    meta = ledger.meta()
    counts = ledger.counts()
    now, window_s = _rate_window(ledger, meta, now, running)
    totals = _totals(ledger, now, window_s)
    by_cause, flagged_tokens = _flagged_by_cause(ledger)
    in_flight = counts[RowState.IN_FLIGHT] if running else 0
    pending = counts[RowState.PENDING] + counts[RowState.IN_FLIGHT] - in_flight
    done, remaining = counts[RowState.DONE], pending + in_flight
    rows_per_s = totals.recent_rows / window_s
    eta_s, eta_basis = _eta(rows_per_s, remaining, window_s)
    elapsed_s = _elapsed_s(meta, totals, now)
    accept = meta.get("spec_accept_length")
    return JobSummary(
        total=sum(counts.values()),
        pending=pending,
        in_flight=in_flight,
        done=done,
        failed=counts[RowState.FAILED],
        clean=done - totals.flagged,
        flagged=totals.flagged,
        rejected=int(meta.get("rejected", "0")),
        state="finished" if remaining == 0 else "incomplete",
        prompt_tokens=totals.prompt_tokens,
        completion_tokens=totals.completion_tokens,
        retries=totals.retries,
        flags=totals.flags,
        rows_per_s=round(rows_per_s, 3),
        output_tokens_per_s=round(totals.recent_tokens / window_s, 1),
        eta_s=eta_s,
        eta_basis=eta_basis,
        elapsed_s=None if elapsed_s is None else round(elapsed_s, 3),
        rows_per_s_overall=_per_s(done, elapsed_s, 3),
        output_tokens_per_s_overall=_per_s(totals.completion_tokens, elapsed_s, 1),
        spec_accept_length=float(accept) if accept else None,
        model=meta.get("model"),
        thinking=meta.get("thinking") == "true",
        servers=json.loads(meta.get("servers", "[]")),
        input=meta.get("input"),
        rate_window_s=round(window_s, 1),
        clock_jump_s=float(meta[CLOCK_JUMP_KEY]) if CLOCK_JUMP_KEY in meta else None,
        by_cause=by_cause,
        flagged_completion_tokens=flagged_tokens,
    )


def _rate_window(ledger: Ledger, meta: dict[str, str], now: float, running: bool) -> tuple[float, float]:
    """The rates' window: its end and its length (RATE_WINDOW_S, or this run's age if younger)."""
    run_started = float(meta.get("run_started_at") or meta.get("initialized_at") or now)
    if not running:
        # a job that ended: its rates are those of its last window, whenever it is asked (else
        # `report` later says 0 rows/s where `generate` ended at its real rate), ending where the
        # run ended: a stall before the end is in it, not a rate from before the stall
        ended = float(meta.get(RUN_ENDED_KEY) or "-inf")
        if ended < run_started:  # a run killed before it said its end: its last finished row
            ((last,),) = ledger.query("SELECT MAX(done_at) FROM rows")
            ended = now if last is None else float(str(last))
        now = min(now, ended)
    return now, max(min(RATE_WINDOW_S, now - run_started), 1.0)


class _Totals(NamedTuple):
    """The ledger's totals over its rows (`_totals`)."""

    prompt_tokens: int
    completion_tokens: int
    retries: int
    recent_rows: int  # finished within the rates' window
    recent_tokens: int
    first_done: float | None
    last_done: float | None
    flagged: int
    flags: dict[str, int]  # the rows with each flag


def _totals(ledger: Ledger, now: float, window_s: float) -> _Totals:
    """One pass over the rows: tokens, retries, the window's rows and tokens, the first and last
    finished, the flagged rows, and each flag's count."""
    flag_sums = ", ".join(f"SUM((flags >> {bit}) & 1)" for bit in range(len(FLAG_NAMES)))
    (totals,) = ledger.query(
        "SELECT COALESCE(SUM(prompt_tokens), 0), COALESCE(SUM(completion_tokens), 0), "
        # attempts count requests that ended; the last of a done or failed row was no retry
        f"COALESCE(SUM(attempts) - SUM(attempts > 0 AND state IN ({RowState.DONE}, {RowState.FAILED})), 0), "
        "SUM(done_at > ? AND done_at <= ?), "
        "SUM(CASE WHEN done_at > ? AND done_at <= ? THEN completion_tokens END), "
        "MIN(done_at), MAX(done_at), "
        f"COALESCE(SUM(state = {RowState.DONE} AND flags != 0), 0), {flag_sums} FROM rows",
        (now - window_s, now) * 2,
    )
    prompt_tokens, completion_tokens, retries, recent_rows, recent_tokens = (_int(v) for v in totals[:5])
    first_done, last_done = (None if v is None else float(str(v)) for v in totals[5:7])
    flags = {name: _int(value) for name, value in zip(FLAG_NAMES, totals[8:], strict=True)}
    return _Totals(
        prompt_tokens,
        completion_tokens,
        retries,
        recent_rows,
        recent_tokens,
        first_done,
        last_done,
        _int(totals[7]),
        flags,
    )


def _eta(rows_per_s: float, remaining: int, window_s: float) -> tuple[float | None, str | None]:
    """The time the rows left take at the window's rate, and what it rests on (None when it
    says nothing: no rows left, or none finished in the window)."""
    if rows_per_s > 0 and remaining:
        return round(remaining / rows_per_s, 1), f"rows/s of the last {window_s:.0f} s; no tail"
    return None, None


def _elapsed_s(meta: dict[str, str], totals: _Totals, now: float) -> float | None:
    """Whole-job time: from the job's start (the ledger's creation) to its last finished row."""
    first_done = totals.first_done
    started = float(meta.get("initialized_at") or (first_done if first_done is not None else now))
    if totals.last_done is None:
        return None
    return max(totals.last_done - started, 1e-3)


def _per_s(count: int, elapsed_s: float | None, digits: int) -> float | None:
    """`count` over the whole job's time, rounded (None without one)."""
    return None if elapsed_s is None else round(count / elapsed_s, digits)


def _flagged_by_cause(ledger: Ledger) -> tuple[dict[str, int], int]:
    """The flagged rows by the one cause each counts under, and their output tokens."""
    by_cause = dict.fromkeys(CAUSE_NAMES, 0)
    flagged_tokens = 0
    for bits, rows, tokens in ledger.query(
        f"SELECT flags, COUNT(*), COALESCE(SUM(completion_tokens), 0) FROM rows "
        f"WHERE state = {RowState.DONE} AND flags != 0 GROUP BY flags"
    ):
        names = [name for bit, name in enumerate(FLAG_NAMES) if _int(bits) >> bit & 1]
        by_cause[primary_cause(names) or CAUSE_NAMES[-1]] += _int(rows)
        flagged_tokens += _int(tokens)
    return by_cause, flagged_tokens


def render_summary(summary: JobSummary, console: Console) -> None:
    table = Table(title=f"generate: {summary.state}", show_header=False)
    for rows in (_count_rows, _rate_rows, _setting_rows):
        for label, value in rows(summary):
            table.add_row(label, value)
    console.print(table)


def _count_rows(s: JobSummary) -> Iterator[tuple[str, str]]:
    """The summary table's rows of counts: rows by outcome, retries, tokens."""
    yield "done", f"{s.done}/{s.total}"
    yield "clean / flagged", f"{s.clean} / {s.flagged}"
    if s.flagged and s.by_cause:
        yield "flagged by cause", ", ".join(f"{k} {v}" for k, v in s.by_cause.items() if v)
    if s.exports is not None:
        yield "rows in each export", ", ".join(f"{k} {v}" for k, v in s.exports.items()) or "none written yet"
    yield "rejected", str(s.rejected)
    yield "failed", str(s.failed)
    yield "pending / in flight", f"{s.pending} / {s.in_flight}"
    yield "retries", str(s.retries)
    yield "tokens in / out", f"{s.prompt_tokens} / {s.completion_tokens}"


def _rate_rows(s: JobSummary) -> Iterator[tuple[str, str]]:
    """The summary table's rows of rates: the whole job's once finished, else the window's."""
    if s.state == "finished" and s.elapsed_s is not None:
        # a finished job's last-minute rates are 0: its totals are what it did
        yield "time (start to last row)", eta_text(s.elapsed_s)
        yield "rows/s (whole job)", f"{s.rows_per_s_overall:.2f}"
        yield "out tok/s (whole job)", f"{s.output_tokens_per_s_overall:.0f}"
        return
    yield f"rows/s (last {s.rate_window_s:.0f} s)", f"{s.rows_per_s:.2f}"
    yield f"out tok/s (last {s.rate_window_s:.0f} s)", f"{s.output_tokens_per_s:.0f}"
    yield "eta", f"{eta_text(s.eta_s)} ({s.eta_basis})" if s.eta_s else "-"


def _setting_rows(s: JobSummary) -> Iterator[tuple[str, str]]:
    """The summary table's last rows: a clock warning, the speculation, the model, the flags."""
    if s.clock_jump_s:
        yield "warning", f"the system clock jumped by {s.clock_jump_s:+.0f} s: times and rates are off"
    accept = s.spec_accept_length
    yield "spec accept length", "-" if accept is None else f"{accept:.2f}"
    yield "model / thinking", f"{s.model} / {s.thinking}"
    for flag, count in s.flags.items():
        yield f"flag {flag}", str(count)


def render_lengths(split: str, lengths: dict[str, Any], console: Console) -> None:
    """The histogram of row lengths (tokens) and how many rows the trainer would cut."""
    table = Table(title=f"row length, {split}/ ({lengths['rows']} rows)", show_header=True)
    table.add_column("tokens")
    table.add_column("rows", justify="right")
    table.add_column("")
    buckets = lengths["histogram"]
    # up to the longest non-empty bucket: empty 64k-token buckets say nothing
    shown = buckets[: max((i + 1 for i, b in enumerate(buckets) if b["rows"]), default=1)]
    widest = max((bucket["rows"] for bucket in shown), default=0) or 1
    for bucket in shown:
        edge = bucket["le_tokens"]
        label = f"<= {edge}" if edge is not None else "longer"
        table.add_row(label, str(bucket["rows"]), "#" * round(30 * bucket["rows"] / widest))
    console.print(table)
    p = lengths["percentiles"]
    console.print(
        "p50/p90/max tokens: " + ", ".join(f"{k} {v['p50']}/{v['p90']}/{v['p100']}" for k, v in p.items())
    )
    if lengths["max_length_tokens"] is not None:
        console.print(f"rows over --max-length {lengths['max_length_tokens']}: {lengths['over_max_length']}")
    if lengths["estimated_rows"]:
        console.print(
            f"reasoning/answer split estimated from characters in {lengths['estimated_rows']} rows "
            "(the server did not report reasoning_tokens)"
        )
