"""Ledger + part reconciliation at each point a kill can strike between write and commit."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from specpilot.generate.ledger.store import LISTING_CACHE_KIB, Ledger, LedgerBatch, PositionRange, RowState
from specpilot.generate.writers.parts import CLEAN, FLAGGED, PartWriter, part_path, reconcile_parts


def _ledger(tmp_path: Path, count: int) -> Ledger:
    ledger = Ledger.in_dir(tmp_path)
    ledger.initialize(((i, f"id{i}") for i in range(count)), dict)
    return ledger


def _line(i: int) -> bytes:
    row = {
        "id": f"id{i}",
        "conversations": [{"role": "user", "content": str(i)}, {"role": "assistant", "content": "a"}],
        "meta": {"prompt_tokens": 1, "completion_tokens": 2, "flags": ["truncated"]},
    }
    return json.dumps(row).encode() + b"\n"


def _write_durable(ledger: Ledger, data: Path, positions: range) -> PartWriter:
    writer = PartWriter(data, ledger.part_commits(), rows_per_part=1000)
    for i in positions:
        writer.add(json.loads(_line(i)), i, 1, 2, 0, 1.0)
    ledger.apply(writer.flush())
    return writer


def _states(ledger: Ledger) -> dict[int, int]:
    return {int(str(p)): int(str(s)) for p, s in ledger.query("SELECT position, state FROM rows")}


def _ids_in(path: Path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_bytes().splitlines()]


def test_rows_fsynced_but_not_committed_are_adopted(tmp_path: Path) -> None:
    ledger, data = _ledger(tmp_path, 6), tmp_path / "data"
    _write_durable(ledger, data, range(3)).close()
    with part_path(data, 0).open("ab") as handle:  # kill after fsync, before commit
        handle.write(_line(3) + _line(4))
    result = reconcile_parts(data, ledger)
    assert (result.adopted_rows, result.dropped_rows, result.truncated_bytes) == (2, 0, 0)
    states = _states(ledger)
    assert [states[i] for i in range(6)] == [RowState.DONE] * 5 + [RowState.PENDING]
    assert ledger.part_commits()[0].committed_bytes == part_path(data, 0).stat().st_size
    (flags,) = ledger.query("SELECT flags FROM rows WHERE position = 3")[0]
    assert flags == 8  # the 'truncated' flag survived adoption


def test_torn_last_line_is_truncated(tmp_path: Path) -> None:
    ledger, data = _ledger(tmp_path, 4), tmp_path / "data"
    _write_durable(ledger, data, range(2)).close()
    committed = part_path(data, 0).stat().st_size
    with part_path(data, 0).open("ab") as handle:
        handle.write(_line(2) + _line(3)[:17])  # kill in the middle of a write
    result = reconcile_parts(data, ledger)
    assert result.adopted_rows == 1 and result.dropped_rows == 1
    assert part_path(data, 0).stat().st_size == committed + len(_line(2))
    assert _ids_in(part_path(data, 0)) == ["id0", "id1", "id2"]
    assert _states(ledger)[3] == RowState.PENDING


def test_tail_duplicates_and_unknown_ids_are_dropped(tmp_path: Path) -> None:
    ledger, data = _ledger(tmp_path, 4), tmp_path / "data"
    _write_durable(ledger, data, range(2)).close()
    stranger = json.dumps({"id": "nobody", "conversations": [{}]}).encode() + b"\n"
    with part_path(data, 0).open("ab") as handle:
        handle.write(_line(1) + _line(2) + _line(2) + stranger + b"not json\n")
    result = reconcile_parts(data, ledger)
    assert result.adopted_rows == 1
    assert _ids_in(part_path(data, 0)) == ["id0", "id1", "id2"]
    # a second pass finds nothing left to do
    assert reconcile_parts(data, ledger).adopted_rows == 0


def test_part_the_ledger_never_heard_of_is_reconciled(tmp_path: Path) -> None:
    ledger, data = _ledger(tmp_path, 3), tmp_path / "data"
    data.mkdir()
    part_path(data, 0).write_bytes(_line(0) + _line(1)[:5])  # first batch, never committed
    assert reconcile_parts(data, ledger).adopted_rows == 1
    writer = PartWriter(data, ledger.part_commits(), rows_per_part=1000)
    writer.add(json.loads(_line(2)), 2, 1, 2, 0, 1.0)
    ledger.apply(writer.flush())
    writer.close()
    assert _ids_in(part_path(data, 0)) == ["id0", "id2"]
    assert set(_states(ledger).values()) == {RowState.DONE, RowState.PENDING}


def test_writer_rotates_parts_and_commits_each(tmp_path: Path) -> None:
    ledger, data = _ledger(tmp_path, 5), tmp_path / "data"
    writer = PartWriter(data, {}, rows_per_part=2)
    for i in range(5):
        writer.add(json.loads(_line(i)), i, 1, 2, 0, 1.0)
    batch = writer.flush()
    ledger.apply(batch)
    writer.close()
    assert [(c.part, c.rows) for c in batch.parts] == [(0, 2), (1, 2), (2, 1)]
    assert [_ids_in(part_path(data, p)) for p in range(3)] == [["id0", "id1"], ["id2", "id3"], ["id4"]]
    assert reconcile_parts(data, ledger).adopted_rows == 0


def test_in_flight_rows_of_a_killed_run_are_requeued(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path, 3)
    ledger.apply(LedgerBatch([0, 1], [], [("HTTP 400: too long", 2)], [], []))
    assert ledger.pending_positions() == set()
    assert ledger.requeue_unfinished(include_failed=False) == 2
    assert ledger.pending_positions() == {0, 1}
    assert ledger.requeue_unfinished(include_failed=True) == 1
    assert ledger.failed_rows() == []


def test_failed_initialization_leaves_nothing(tmp_path: Path) -> None:
    ledger = Ledger.in_dir(tmp_path)

    def refuse() -> dict[str, str]:
        raise RuntimeError("input refused")

    with pytest.raises(RuntimeError):
        ledger.initialize(((i, f"id{i}") for i in range(10)), refuse)
    assert not ledger.is_initialized()
    assert ledger.query("SELECT COUNT(*) FROM rows") == [(0,)]


def test_report_can_read_while_writer_holds_the_ledger(tmp_path: Path) -> None:
    writer_side = _ledger(tmp_path, 3)
    writer_side.apply(LedgerBatch([0], [], [], [], []))
    reader = Ledger.in_dir(tmp_path, readonly=True)
    assert reader.query("SELECT state FROM rows WHERE position = 0") == [(RowState.IN_FLIGHT,)]
    reader.close()


def test_the_flagged_split_keeps_its_own_parts_and_is_reconciled_alike(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path, 6)
    clean, flagged = tmp_path / CLEAN.directory, tmp_path / FLAGGED.directory
    _write_durable(ledger, clean, range(2)).close()
    writer = PartWriter(flagged, ledger.part_commits(), rows_per_part=1000, first_part=FLAGGED.first_part)
    writer.add(json.loads(_line(2)), 2, 1, 2, 8, 1.0)
    ledger.apply(writer.flush())
    writer.close()
    flagged_part = part_path(flagged, FLAGGED.first_part, FLAGGED.first_part)
    assert flagged_part.name == "part-00000.jsonl" and _ids_in(flagged_part) == ["id2"]
    with flagged_part.open("ab") as handle:  # kill after fsync, before commit: a whole row and a torn one
        handle.write(_line(3) + _line(4)[:10])
    assert reconcile_parts(clean, ledger, CLEAN.first_part).adopted_rows == 0
    result = reconcile_parts(flagged, ledger, FLAGGED.first_part)
    assert (result.adopted_rows, result.dropped_rows) == (1, 1)
    assert _ids_in(flagged_part) == ["id2", "id3"]
    assert set(ledger.part_commits()) == {0, FLAGGED.first_part}
    # a writer resumed on the flagged split appends to its own part, after the adopted row
    resumed = PartWriter(flagged, ledger.part_commits(), 1000, first_part=FLAGGED.first_part)
    resumed.add(json.loads(_line(5)), 5, 1, 2, 8, 1.0)
    ledger.apply(resumed.flush())
    resumed.close()
    assert _ids_in(flagged_part) == ["id2", "id3", "id5"] and _ids_in(part_path(clean, 0)) == ["id0", "id1"]


def test_a_lost_part_is_requeued_in_its_own_split_only(tmp_path: Path) -> None:
    """The requeue of deleted or cut parts and the flagged split's part ids (from 2**32) are one
    mechanism: each split's pass looks at its own parts, so neither requeues the other's rows."""
    ledger = _ledger(tmp_path, 6)
    clean, flagged = tmp_path / CLEAN.directory, tmp_path / FLAGGED.directory
    _write_durable(ledger, clean, range(3)).close()
    writer = PartWriter(flagged, ledger.part_commits(), rows_per_part=1000, first_part=FLAGGED.first_part)
    for i in (3, 4):
        writer.add(json.loads(_line(i)), i, 1, 2, 8, 1.0)
    ledger.apply(writer.flush())
    writer.close()
    flagged_part = part_path(flagged, FLAGGED.first_part, FLAGGED.first_part)
    written = flagged_part.read_bytes()
    flagged_part.write_bytes(written[: written.index(b"\n") + 11])  # cut short: its second row is lost

    assert reconcile_parts(clean, ledger, CLEAN.first_part).requeued_rows == 0
    assert [_states(ledger)[i] for i in range(6)] == [RowState.DONE] * 5 + [RowState.PENDING]
    result = reconcile_parts(flagged, ledger, FLAGGED.first_part)
    assert (result.requeued_rows, result.lost_parts) == (1, ("part-00000.jsonl",))
    assert _ids_in(flagged_part) == ["id3"]
    states = _states(ledger)
    assert [states[i] for i in range(6)] == [RowState.DONE] * 4 + [RowState.PENDING] * 2
    assert ledger.part_commits()[FLAGGED.first_part].rows == 1

    part_path(clean, 0).unlink()  # deleted: all its rows are sent again, the flagged row stays done
    result = reconcile_parts(clean, ledger, CLEAN.first_part)
    assert (result.requeued_rows, result.lost_parts) == (3, ("part-00000.jsonl",))
    states = _states(ledger)
    assert [states[i] for i in range(6)] == [RowState.PENDING] * 3 + [RowState.DONE] + [RowState.PENDING] * 2


def test_pending_positions_are_exact_whether_one_run_or_not(tmp_path: Path) -> None:
    ledger = Ledger.in_dir(tmp_path)
    # positions 0-5 and 7-9 listed (6 was a rejected row): a gap, so not one run
    ledger.initialize(((i, f"id{i}") for i in [*range(6), 7, 8, 9]), dict)
    assert ledger.pending_positions() == {0, 1, 2, 3, 4, 5, 7, 8, 9}
    ledger.apply(LedgerBatch([7, 8, 9], [], [], [], []))
    whole = ledger.pending_positions()
    assert isinstance(whole, PositionRange)  # a fresh job's: no set of every position
    assert whole == {0, 1, 2, 3, 4, 5} and sorted(whole) == [0, 1, 2, 3, 4, 5] and len(whole) == 6
    assert 5 in whole and 6 not in whole and -1 not in whole and "5" not in whole
    ledger.apply(LedgerBatch([2], [], [], [], []))
    assert ledger.pending_positions() == {0, 1, 3, 4, 5}
    ledger.apply(LedgerBatch([0, 1, 3, 4, 5], [], [], [], []))
    assert ledger.pending_positions() == set()


@pytest.mark.parametrize("refused", [False, True])
def test_listing_gives_back_its_larger_page_cache(tmp_path: Path, refused: bool) -> None:
    ledger = Ledger.in_dir(tmp_path)
    before = ledger.query("PRAGMA cache_size")
    during: list[object] = []

    def finish() -> dict[str, str]:
        during.extend(ledger.query("PRAGMA cache_size"))
        if refused:
            raise ValueError("duplicate ids")
        return {}

    with pytest.raises(ValueError) if refused else contextlib.nullcontext():
        ledger.initialize(((i, f"id{i}") for i in range(3)), finish)
    assert during == [(-LISTING_CACHE_KIB,)] and during != before
    assert ledger.query("PRAGMA cache_size") == before  # the long job runs with the usual cache
