"""`generate --retry-truncated --max-tokens N`: the rows cut off at the old budget, sent again.

Truncated rows are done and sit in `flagged/`. To send them again each flagged part is
rewritten without them (to a temporary file, fsynced, renamed over the part), then one
ledger transaction puts them back to pending and shrinks the part's commit. A kill
between the rename and the commit leaves a part shorter than its commit whose lines
are all done rows of it: exactly the case `writer.reconcile_parts` repairs by sending
the missing rows again, so every row still ends up written once.
"""

from __future__ import annotations

import json
import os
import zlib
from collections import defaultdict
from pathlib import Path

from specpilot.errors import UserError
from specpilot.generate.ledger.store import Ledger, PartCommit, RowState
from specpilot.generate.rows.validate import FLAG_NAMES
from specpilot.generate.writers.parts import FLAGGED, SPLIT_PARTS, fsync_dir, part_path

TRUNCATED_BIT = 1 << FLAG_NAMES.index("truncated")
MISSING_REASONING_BIT = 1 << FLAG_NAMES.index("missing_reasoning")


def check_budget(previous: int | None, wanted: int | None) -> None:
    """UserError unless `wanted` is a budget larger than the one the rows were cut at."""
    if wanted is None:
        raise UserError(
            "--retry-truncated needs the larger budget to retry at",
            field="--retry-truncated",
            fix=f"pass --max-tokens N with N above {previous if previous is not None else 'the old budget'}",
        )
    if previous is not None and wanted <= previous:
        raise UserError(
            f"--max-tokens {wanted} is no larger than the {previous} the rows were cut off at",
            field="--max-tokens",
            fix=f"pass a larger budget, e.g. --max-tokens {previous * 2}",
        )


def requeue_truncated(job_dir: Path, ledger: Ledger) -> int:
    """Move every done, truncated row back to pending (see the module docstring); how many."""
    return requeue_flagged(job_dir, ledger, TRUNCATED_BIT)


def requeue_flagged(job_dir: Path, ledger: Ledger, flag_bit: int) -> int:
    """Move every done row carrying `flag_bit` back to pending, as truncated ones; how many."""
    query = (
        f"SELECT part, id, position FROM rows WHERE state = {RowState.DONE} "
        f"AND (flags & {flag_bit}) != 0 AND part >= ? AND part < ?"
    )
    by_part: dict[int, dict[str, int]] = defaultdict(dict)
    for part, row_id, position in ledger.query(query, (FLAGGED.first_part, FLAGGED.first_part + SPLIT_PARTS)):
        by_part[int(str(part))][str(row_id)] = int(str(position))
    commits = ledger.part_commits()
    directory = job_dir / FLAGGED.directory
    for part, truncated in sorted(by_part.items()):
        path = part_path(directory, part, FLAGGED.first_part)
        kept_bytes, kept_rows, crc = _rewrite_without(path, commits[part], set(truncated))
        mark = PartCommit(part, kept_bytes, kept_rows, crc, path.stat().st_mtime_ns, kept_bytes, crc)
        ledger.requeue_lost(truncated.values(), mark)
    return sum(len(rows) for rows in by_part.values())


def _rewrite_without(path: Path, commit: PartCommit, dropped_ids: set[str]) -> tuple[int, int, int]:
    """Rewrite the committed rows of `path` without `dropped_ids`, line by line; (bytes, rows,
    crc32) kept."""
    tmp = path.with_name(path.name + ".tmp")
    kept_bytes = kept_rows = crc = 0
    left = commit.committed_bytes
    with path.open("rb") as source, tmp.open("wb") as out:
        for line in source:
            if left <= 0:
                break
            left -= len(line)
            if json.loads(line)["id"] in dropped_ids:
                continue
            out.write(line)
            kept_bytes += len(line)
            kept_rows += 1
            crc = zlib.crc32(line, crc)
        out.flush()
        os.fsync(out.fileno())
    tmp.replace(path)
    fsync_dir(path.parent)
    return kept_bytes, kept_rows, crc
