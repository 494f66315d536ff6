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
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from specpilot.errors import UserError
from specpilot.generate.ledger import LEDGER_FILE, Ledger, RowState
from specpilot.generate.stats import RATE_WINDOW_S, eta_text
from specpilot.generate.validate import FLAG_NAMES


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
    except sqlite3.DatabaseError as err:
        raise UserError(
            f"the ledger in {directory} cannot be read ({err})",
            field="DIR",
            fix="restore the folder from a backup; the rows themselves are in its data/ folder",
        ) from None


def summarize(ledger: Ledger, *, now: float | None = None) -> dict[str, Any]:
    """Counts, tokens, flags, recent rate and ETA of the job, as one JSON-able object."""
    now = time.time() if now is None else now
    meta = ledger.meta()
    counts = {state.name.lower(): count for state, count in ledger.counts().items()}
    flag_sums = ", ".join(f"SUM((flags >> {bit}) & 1)" for bit in range(len(FLAG_NAMES)))
    (totals,) = ledger.query(
        "SELECT COALESCE(SUM(prompt_tokens), 0), COALESCE(SUM(completion_tokens), 0), "
        "COALESCE(SUM(MAX(attempts - 1, 0)), 0), "
        f"SUM(done_at > ?), SUM(CASE WHEN done_at > ? THEN completion_tokens END), "
        f"MIN(CASE WHEN done_at > ? THEN done_at END), MIN(done_at), MAX(done_at), "
        f"COALESCE(SUM(state = {RowState.DONE} AND flags != 0), 0), {flag_sums} FROM rows",
        (now - RATE_WINDOW_S,) * 3,
    )
    prompt_tokens, completion_tokens, retries, recent_rows, recent_tokens, first = totals[:6]
    first_done, last_done, flagged = totals[6:9]
    flags = {name: int(str(value or 0)) for name, value in zip(FLAG_NAMES, totals[9:], strict=True)}
    # The rate over the last minute, or over the job's life if it is younger than that.
    window_s = max(now - float(str(first)), 1.0) if first is not None else RATE_WINDOW_S
    rows_per_s = int(str(recent_rows or 0)) / window_s
    remaining = counts["pending"] + counts["in_flight"]
    total = sum(counts.values())
    accept = meta.get("spec_accept_length")
    # Whole-job totals: from the job's start (the ledger's creation) to its last finished row.
    started = float(meta.get("initialized_at") or str(first_done or now))
    elapsed_s = max(float(str(last_done)) - started, 1e-3) if last_done is not None else None
    done_rows = counts["done"]
    return {
        "total": total,
        **counts,
        "clean": counts["done"] - int(str(flagged)),
        "flagged": int(str(flagged)),
        "rejected": int(meta.get("rejected", "0")),
        "state": "finished" if remaining == 0 else "incomplete",
        "prompt_tokens": int(str(prompt_tokens)),
        "completion_tokens": int(str(completion_tokens)),
        "retries": int(str(retries)),
        "flags": flags,
        "rows_per_s": round(rows_per_s, 3),
        "output_tokens_per_s": round(int(str(recent_tokens or 0)) / window_s, 1),
        "eta_s": round(remaining / rows_per_s, 1) if rows_per_s > 0 and remaining else None,
        "elapsed_s": None if elapsed_s is None else round(elapsed_s, 3),
        "rows_per_s_overall": None if elapsed_s is None else round(done_rows / elapsed_s, 3),
        "output_tokens_per_s_overall": (
            None if elapsed_s is None else round(int(str(completion_tokens)) / elapsed_s, 1)
        ),
        "spec_accept_length": float(accept) if accept else None,
        "model": meta.get("model"),
        "thinking": meta.get("thinking") == "true",
        "servers": json.loads(meta.get("servers", "[]")),
        "input": meta.get("input"),
    }


def render_summary(summary: dict[str, Any], console: Console) -> None:
    table = Table(title=f"generate: {summary['state']}", show_header=False)
    table.add_row("done", f"{summary['done']}/{summary['total']}")
    table.add_row("clean / flagged", f"{summary['clean']} / {summary['flagged']}")
    table.add_row("rejected", str(summary["rejected"]))
    table.add_row("failed", str(summary["failed"]))
    table.add_row("pending / in flight", f"{summary['pending']} / {summary['in_flight']}")
    table.add_row("retries", str(summary["retries"]))
    table.add_row("tokens in / out", f"{summary['prompt_tokens']} / {summary['completion_tokens']}")
    if summary["state"] == "finished" and summary["elapsed_s"] is not None:
        # a finished job's last-minute rates are 0: its totals are what it did
        table.add_row("time (start to last row)", eta_text(summary["elapsed_s"]))
        table.add_row("rows/s (whole job)", f"{summary['rows_per_s_overall']:.2f}")
        table.add_row("out tok/s (whole job)", f"{summary['output_tokens_per_s_overall']:.0f}")
    else:
        table.add_row("rows/s (last minute)", f"{summary['rows_per_s']:.2f}")
        table.add_row("out tok/s (last minute)", f"{summary['output_tokens_per_s']:.0f}")
        table.add_row("eta", eta_text(summary["eta_s"]) if summary["eta_s"] else "-")
    accept = summary["spec_accept_length"]
    table.add_row("spec accept length", "-" if accept is None else f"{accept:.2f}")
    table.add_row("model / thinking", f"{summary['model']} / {summary['thinking']}")
    for flag, count in summary["flags"].items():
        table.add_row(f"flag {flag}", str(count))
    console.print(table)


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
