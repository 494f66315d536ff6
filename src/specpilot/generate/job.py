"""Running a generation job: prepare the ledger, hand the rows to `dispatch`, report.

Order of a run: check the output dir; open the ledger; on the first run list every
input row (duplicate ids refused unless `--dedupe`), on a resume check the input and
parameters are the same, repair the parts (`writer.reconcile_parts`) and requeue rows a
kill left in flight; then stream only the pending input rows to the servers. Every
`flush_interval_s` (or `flush_rows` answers) the writer fsyncs and the ledger commits.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sqlite3
import sys
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO

import aiohttp

from specpilot import __version__, jsontext
from specpilot.atomic import write_text_atomic
from specpilot.errors import DiskFull, UserError
from specpilot.generate.dispatch.answers import GUARD_STOP
from specpilot.generate.dispatch.client import API_KEY_ENV, KEY_FIX, UNAUTHORIZED_STATUSES, open_session
from specpilot.generate.dispatch.dispatcher import Dispatcher
from specpilot.generate.dispatch.endpoints import Endpoint, default_model, served_context
from specpilot.generate.dispatch.policy import (
    GENERATE_SETTING_NAMES,
    JOB_SETTING_NAMES,
    ClientFactory,
    Companion,
    DispatchPolicy,
    RetryPolicy,
)
from specpilot.generate.ledger.lock import LOCK_FILE, DirectoryLock
from specpilot.generate.ledger.report import RUN_ENDED_KEY, JobSummary, ServerRun, summarize
from specpilot.generate.ledger.store import LEDGER_FILE, Ledger, RowState
from specpilot.generate.rows.inputs import (
    InputMark,
    InputSource,
    as_written,
    check_output_dir,
    iter_rows,
    resolve_input,
    written_by_output,
)
from specpilot.generate.rows.types import RejectedRow
from specpilot.generate.sampling import NAMED_KEYS, Sampling
from specpilot.generate.writers.parts import (
    CRC_CHUNK_BYTES,
    DATA_DIR,
    FLAGGED_DIR,
    SPLITS,
    PartWriter,
    damaged_parts,
    reconcile_parts,
    split_parts,
)
from specpilot.generate.writers.truncated import (
    MISSING_REASONING_BIT,
    check_budget,
    requeue_flagged,
    requeue_truncated,
)
from specpilot.generate.yields import YieldFloor, YieldGuard, cause_named, fix_for, floor_setting
from specpilot.secrets import CONTENT_MARKER, mask_fields, url_without_credentials

#: something that watches a running job (the status page), entered once its dispatcher exists
JobWatcher = Callable[[Dispatcher], AbstractAsyncContextManager[object]]

DUPLICATES_SHOWN = 5
REJECTED_SHOWN = 20
DAMAGED_SHOWN = 20
REJECTED_FILE = "rejected.jsonl"
#: what generate writes in its output folder: an input there would be overwritten or emptied
GENERATED_NAMES = frozenset(
    {
        LEDGER_FILE, f"{LEDGER_FILE}-wal", f"{LEDGER_FILE}-shm", LOCK_FILE, DATA_DIR, FLAGGED_DIR,
        "errors.jsonl", REJECTED_FILE, "manifest.json",
    }
)  # fmt: skip
PARAM_KEYS = ("model", "thinking", "keep_given_turns", *NAMED_KEYS, "request_fields")
#: the error of rows left unsent once no server was left
NOT_SENT = "not sent: "
#: how the errors of rows failed by their server, not by themselves, begin: a malformed answer
#: (a token count of 10**20, a body of another shape) or none sent; a resume sends them again
SERVER_FAULTS = ("malformed response", NOT_SENT)
#: the --max-tokens the rows of the last --retry-truncated were cut off at
RETRY_FROM_KEY = "truncated_retry_from"
#: what a job started before a key existed had
DEFAULT_PARAMS = {"keep_given_turns": "false", "request_fields": "{}"}


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class JobConfig:
    input_path: Path
    output_dir: Path
    endpoints: list[Endpoint]
    model: str | None
    sampling: Sampling
    keep_given_turns: bool = False
    concurrency: int = 64
    limit: int | None = None
    dedupe: bool = False
    #: reject input rows with fields specpilot does not read (else ignored, counted in one line)
    strict_rows: bool = False
    retry_failed: bool = False
    retry_truncated: bool = False  # send rows cut off at the old --max-tokens again, at a larger one
    max_attempts: int = 6
    retry_base_s: float = 1.0
    retry_cap_s: float = 60.0
    request_timeout_s: float = 1800.0
    stall_after_s: float | None = None  # None: the stall bound is measured (dispatch/watchdog.py)
    probe_timeout_s: float = 5.0
    probe_cap_s: float = 30.0
    give_up_after_s: float = 3600.0
    flush_interval_s: float = 0.5
    flush_rows: int = 2048
    rows_per_part: int = 100_000
    metrics_interval_s: float = 10.0
    progress_interval_s: float = 30.0
    show_progress: bool = True
    notify: Callable[[str], None] = _stderr
    #: how requests are sent (default: one non-streaming call each); `bench` streams to time tokens
    client_factory: ClientFactory | None = None
    #: the bearer token to send (`specpilot job`: the key its server spec starts the engine with;
    #: else $SPECPILOT_API_KEY), never shown
    api_key: str | None = field(default=None, repr=False)
    #: more secret values (the job's server spec's): masked in errors, replaced where an answer echoes them
    secrets: tuple[str, ...] = field(default=(), repr=False)
    #: the clean yield the job must keep (`generate.yields`); a floor of 0 turns the guard off
    yield_floor: YieldFloor = field(default_factory=YieldFloor)
    #: the servers' context in tokens (bounds a proposed max_tokens); None: asked of /v1/models
    context_tokens: int | None = None
    #: the fixes the guard and the stops name are `specpilot job`'s (its keys and command), not generate's
    in_job: bool = False
    #: a signal's first lets the requests in flight finish; False: it is the command's (`bench`)
    drain_on_signal: bool = True

    def dispatch_policy(self) -> DispatchPolicy:
        return DispatchPolicy(
            concurrency=self.concurrency,
            keep_given_turns=self.keep_given_turns,
            retry=RetryPolicy(self.max_attempts, self.retry_base_s, self.retry_cap_s),
            request_timeout_s=self.request_timeout_s,
            stall_after_s=self.stall_after_s,
            probe_timeout_s=self.probe_timeout_s,
            probe_cap_s=self.probe_cap_s,
            give_up_after_s=self.give_up_after_s,
            flush_interval_s=self.flush_interval_s,
            flush_rows=self.flush_rows,
            metrics_interval_s=self.metrics_interval_s,
            progress_interval_s=self.progress_interval_s if self.show_progress else None,
            names=JOB_SETTING_NAMES if self.in_job else GENERATE_SETTING_NAMES,
            drain_on_signal=self.drain_on_signal,
        )


@dataclass
class Outcome:
    """What `generate` prints and how it exits."""

    summary: JobSummary
    exit_code: int
    message: str
    #: the yield guard's numbers when it stopped the job (or the finished job's yield was under
    #: its floor): what `job` records in job.json
    yield_stop: dict[str, Any] | None = None
    #: seconds of this run every server was down (what `job` counts as stalled)
    stalled_s: float = 0.0
    #: SIGINT, SIGTERM or SIGHUP stopped the run (`job` then exits as a signal ends it)
    signalled: bool = False


#: the statuses a key not sent is answered with, as the stop names them ("401/403")
_UNAUTHORIZED = "/".join(map(str, UNAUTHORIZED_STATUSES))


def refuse_input_in_output(input_path: Path, output_dir: Path) -> None:
    """An input among the files generate writes in `output_dir` would be overwritten or emptied
    (a part, errors.jsonl, the ledger): refused, with its path, before anything is written."""
    written = written_by_output(input_path, output_dir, GENERATED_NAMES)
    if written is not None:
        raise UserError(
            f"{as_written(input_path, written)} is a file generate writes in {output_dir}: it would be "
            "overwritten",
            field="--input",
            fix="copy the prompts out of the output folder and pass the copy, or choose another --output",
        )


class Job:
    def __init__(self, config: JobConfig) -> None:
        self.config = config
        self.source: InputSource = resolve_input(config.input_path)
        refuse_input_in_output(config.input_path, config.output_dir)
        check_output_dir(config.output_dir)
        self.lock = DirectoryLock(config.output_dir)
        try:
            self.ledger = Ledger.in_dir(config.output_dir)
        except BaseException:
            self.lock.release()
            raise
        self.pending: AbstractSet[int] = set()
        self.guard: YieldGuard | None = None

    def close(self) -> None:
        self.ledger.close()
        self.lock.release()

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- preparation (synchronous) -------------------------------------------

    def prepare(self, model: str) -> None:
        meta = self.ledger.meta()
        params = self._params(model)
        resumed = "initialized_at" in meta
        if not resumed:
            self._start(params)
        thinking_off = resumed and self._check_same_job(meta, params)
        for split in SPLITS:
            self._repair_parts(self.config.output_dir / split.directory, split.first_part)
        self._requeue_truncated(meta, params)
        self._requeue_resent(params, thinking_off)
        # this run's start: where its rates' window may begin (a resumed job's earlier rows
        # finished before it, not within it)
        self.ledger.set_meta(
            {
                "servers": json.dumps([url_without_credentials(e.base_url) for e in self.config.endpoints]),
                "run_started_at": repr(time.time()),
            }
        )
        pending = self.ledger.pending_positions()
        if self.config.limit is not None:
            pending = {p for p in pending if p < self.config.limit}
        self.pending = pending
        if resumed:
            self._note_resume(len(pending))

    def _start(self, params: dict[str, str]) -> None:
        """A new job: its ledger made and the input listed (nothing to retry yet)."""
        if self.config.retry_truncated:
            raise UserError(
                f"{self.config.output_dir} holds no job yet: no truncated rows to retry",
                field="--retry-truncated",
                fix="drop it for a new job (pass it when resuming one with truncated rows)",
            )
        self._initialize(params)

    def _note_resume(self, to_send: int) -> None:
        """One line: what a resumed job has done and what this run sends."""
        counts = self.ledger.counts()
        done, failed, total = counts[RowState.DONE], counts[RowState.FAILED], sum(counts.values())
        self.config.notify(
            f"resuming {self.config.output_dir}: {done:,} of {total:,} rows already done"
            f"{f', {failed:,} failed' if failed else ''}; {to_send:,} to send now"
        )

    def _repair_parts(self, directory: Path, first_part: int) -> None:
        """Match a split's part files with the ledger; rows lost, damaged or changed are queued again."""
        directory.mkdir(parents=True, exist_ok=True)
        repaired = reconcile_parts(directory, self.ledger, first_part)
        if repaired.lost_parts:
            self.config.notify(
                f"{', '.join(repaired.lost_parts)} in {directory} lost rows since the last run "
                f"(deleted or cut short): {repaired.requeued_rows} rows are queued to be generated again"
            )
        for damaged in repaired.damaged[:DAMAGED_SHOWN]:
            self.config.notify(f"{damaged.describe()}: taken out, queued to be generated again")
        if len(repaired.damaged) > DAMAGED_SHOWN:
            self.config.notify(f"... {len(repaired.damaged) - DAMAGED_SHOWN} more damaged rows")
        if repaired.changed_parts:
            self.config.notify(
                f"{repaired.changed_rows} committed rows in {', '.join(repaired.changed_parts)} in "
                f"{directory} changed since they were written (checksum mismatch): taken out and "
                "queued to be generated again"
            )

    def _requeue_truncated(self, meta: dict[str, str], params: dict[str, str]) -> None:
        """--retry-truncated: the truncated rows queued again (once: a resumed retry only says so)."""
        if self.config.retry_truncated and self._retry_resumed(meta, params):
            self.config.notify(
                f"resuming the retry of truncated rows at --max-tokens {self.config.sampling.max_tokens} "
                f"(they were cut off at {meta[RETRY_FROM_KEY]})"
            )
        elif self.config.retry_truncated:
            retried = requeue_truncated(self.config.output_dir, self.ledger)
            # after: a kill before retries again; the budget they were cut at, for a resume of this retry
            self.ledger.set_meta(
                {"max_tokens": params["max_tokens"], RETRY_FROM_KEY: meta.get("max_tokens", "null")}
            )
            self.config.notify(
                f"{retried} truncated rows queued again at --max-tokens {self.config.sampling.max_tokens}"
            )

    def _requeue_resent(self, params: dict[str, str], thinking_off: bool) -> None:
        """Queue what this run sends again: rows without reasoning once thinking is off, rows failed
        for their server's fault, the last run's rows in flight, and every unfinished row."""
        if thinking_off:
            again = requeue_flagged(self.config.output_dir, self.ledger, MISSING_REASONING_BIT)
            self.ledger.set_meta({"thinking": params["thinking"]})  # after: a kill before requeues again
            self.config.notify(
                f"thinking is now off (--no-thinking): the {again} rows that came back without reasoning "
                "are queued to be generated again"
            )
        if not self.config.retry_failed:
            again = self.ledger.requeue_failed_by(SERVER_FAULTS)
            if again:  # a good server now may answer them: no row is left behind for its server's fault
                self.config.notify(
                    f"{again} rows failed on a malformed answer or were never sent (their server's "
                    "fault, not theirs): they are sent again"
                )
        in_flight = self.ledger.counts()[RowState.IN_FLIGHT]
        if in_flight:  # what the last run's stop cost: these are generated again
            self.config.notify(f"the last run stopped with {in_flight} rows in flight; they are sent again")
            self.ledger.set_meta({"resent_in_flight": str(in_flight)})
        self.ledger.requeue_unfinished(include_failed=self.config.retry_failed)

    def _params(self, model: str) -> dict[str, str]:
        c = self.config
        values = {
            "model": model,
            "thinking": c.sampling.thinking,
            "keep_given_turns": c.keep_given_turns,
            **{key: getattr(c.sampling, key) for key in NAMED_KEYS},
            # stored and shown (ledger, manifest.json): an --extra-body api_key is masked
            "request_fields": mask_fields(dict(sorted(c.sampling.request_fields.items()))),
        }
        return {
            key: json.dumps(value) if not isinstance(value, str) else value for key, value in values.items()
        }

    def _initialize(self, params: dict[str, str]) -> None:
        seen: dict[str, int] = {}
        duplicates: list[str] = []
        rejected: list[RejectedRow] = []
        ignored: Counter[str] = Counter()

        marks: list[InputMark] = []

        def listed() -> Iterator[tuple[int, str]]:
            rows = iter_rows(
                self.source,
                keep_given_turns=self.config.keep_given_turns,
                strict=self.config.strict_rows,
                marks=marks,
            )
            for row in rows:
                if isinstance(row, RejectedRow):
                    rejected.append(row)
                    continue
                if row.ignored_fields:  # Counter.update costs even when empty, 902k times
                    ignored.update(row.ignored_fields)
                if row.row_id in seen:
                    duplicates.append(row.row_id)
                    continue
                seen[row.row_id] = row.position
                yield row.position, row.row_id

        def check() -> dict[str, str]:
            if ignored:
                counts = ", ".join(f"{name} in {count:,} rows" for name, count in sorted(ignored.items()))
                self.config.notify(
                    f"ignored fields specpilot does not read: {counts} (--strict refuses such rows)"
                )
            self._report_rejected(rejected)
            if not seen:
                raise UserError(
                    f"{self.source.path} has no usable rows ({len(rejected)} rejected)",
                    field="--input",
                    fix="pass a file with at least one valid prompt row (the lines above say what is wrong; "
                    "`specpilot generate --help` shows every row shape)",
                )
            if duplicates and not self.config.dedupe:
                shown = ", ".join(list(dict.fromkeys(duplicates))[:DUPLICATES_SHOWN])
                raise UserError(
                    f"{len(duplicates)} rows repeat an earlier id (e.g. {shown})",
                    field="--input",
                    fix="make the ids unique, or pass --dedupe to keep only the first row of each id",
                )
            return {
                **params,
                "input": str(self.source.path),
                "input_format": self.source.kind,
                "input_fingerprint": self.source.fingerprint(),
                "input_sha256": self.source.sha256(),
                "duplicates_skipped": str(len(duplicates)),
                "rejected": str(len(rejected)),
            }

        self.ledger.initialize(listed(), check, lambda: _with_block_crcs(self.source, marks))

    def _report_rejected(self, rejected: list[RejectedRow]) -> None:
        """One line per reason, with how many rows it rejected and the first of them (the first
        few reasons; every row in rejected.jsonl): 900k rows with one bad field are one line."""
        by_reason: dict[tuple[str, str], list[RejectedRow]] = {}
        for row in rejected:
            by_reason.setdefault((row.problem, row.fix), []).append(row)
        for (problem, fix), rows in list(by_reason.items())[:REJECTED_SHOWN]:
            if len(rows) == 1:
                self.config.notify(f"rejected {rows[0].line()}")
                continue
            first = rows[0].where + (f" (id {rows[0].row_id})" if rows[0].row_id else "")
            self.config.notify(f"rejected {len(rows):,} rows: {problem}; {fix} (first: {first})")
        if len(by_reason) > REJECTED_SHOWN:
            more = len(by_reason) - REJECTED_SHOWN
            self.config.notify(f"... {more} more reasons; every rejected row is in {REJECTED_FILE}")
        records = ({"where": r.where, "id": r.row_id, "problem": r.problem, "fix": r.fix} for r in rejected)
        write_text_atomic(
            self.config.output_dir / REJECTED_FILE,
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
        )

    @staticmethod
    def _retry_resumed(meta: dict[str, str], params: dict[str, str]) -> bool:
        """--retry-truncated again at the budget an earlier retry already moved the job to."""
        return RETRY_FROM_KEY in meta and meta.get("max_tokens") == params["max_tokens"]

    def _check_same_job(self, meta: dict[str, str], params: dict[str, str]) -> bool:
        """Refuse other parameters than the job's; True when thinking is turned off as the
        no-reasoning guard advises (every done row came back without reasoning: sent again)."""
        changed, thinking_off = self._changed_params(meta, params)
        if changed:
            was = ", ".join(f"{k}={meta.get(k)} (now {params[k]})" for k in changed)
            raise UserError(
                f"{self.config.output_dir} holds a job with other parameters: {was}",
                field="--output",
                fix="repeat the original parameters to resume, or choose a new --output directory",
            )
        self._check_same_input(meta)
        return thinking_off

    def _changed_params(self, meta: dict[str, str], params: dict[str, str]) -> tuple[list[str], bool]:
        """The parameters that differ from the job's, less those this run may change (thinking
        turned off as the guard advises: the bool; --max-tokens of a retry of truncated rows)."""
        # a ledger from before a parameter existed ran with its default
        changed = [k for k in PARAM_KEYS if meta.get(k, DEFAULT_PARAMS.get(k)) != params[k]]
        thinking_off = (
            "thinking" in changed and params["thinking"] == "false" and self._only_rows_without_reasoning()
        )
        if thinking_off:
            changed.remove("thinking")
        if self.config.retry_truncated:
            # a retry resumed (after a kill) is checked against the budget the rows were cut at
            cut_at = (
                meta[RETRY_FROM_KEY] if self._retry_resumed(meta, params) else meta.get("max_tokens", "null")
            )
            check_budget(json.loads(cut_at), self.config.sampling.max_tokens)
            changed = [k for k in changed if k != "max_tokens"]
        return changed, thinking_off

    def _check_same_input(self, meta: dict[str, str]) -> None:
        """Refuse an input whose bytes changed since the job listed it (a new fingerprint of the
        same bytes, e.g. a copy, is recorded)."""
        if meta.get("input_fingerprint") == self.source.fingerprint():
            return
        if meta.get("input_sha256") != self.source.sha256():
            raise UserError(
                f"{self.source.path} changed since this job started{self._where_changed()}",
                field="--input",
                fix="pass the original input to resume, or choose a new --output directory for the new input",
            )
        self.ledger.set_meta({"input_fingerprint": self.source.fingerprint()})

    def _only_rows_without_reasoning(self) -> bool:
        """Whether the job has done rows and each came back without reasoning (the guard's stop)."""
        query = (
            f"SELECT COUNT(*), SUM((flags & {MISSING_REASONING_BIT}) != 0) FROM rows "
            f"WHERE state = {RowState.DONE}"
        )
        ((done, without),) = self.ledger.query(query, ())
        return bool(done) and done == without

    def _where_changed(self) -> str:
        """Which lines of a changed JSONL input differ: the first block of rows whose bytes do not
        match the crc32 recorded when the job was listed ("" when that cannot be told)."""
        marks = self.ledger.input_marks()
        if self.source.kind != "jsonl" or not marks or marks[0][3] is None:
            return ""
        now = _with_block_crcs(self.source, [InputMark(p, o, n) for p, o, n, _ in marks])
        for index, (then, found) in enumerate(zip(marks, now, strict=True)):
            if then[3] != found[3]:
                last = f"-{marks[index + 1][2] - 1}" if index + 1 < len(marks) else " on"
                return f" (first within lines {then[2]}{last})"
        return ""

    def dispatcher(self, session: aiohttp.ClientSession, model: str) -> Dispatcher:
        """The dispatcher of this run's pending rows (after `prepare`)."""
        commits = self.ledger.part_commits()
        floor = self.config.yield_floor
        if floor.on:
            total = sum(self.ledger.counts().values())
            in_scope = total if self.config.limit is None else min(total, self.config.limit)
            self.guard = YieldGuard(floor, in_scope, self.config.sampling.max_tokens)
        writers = {
            split: PartWriter(
                self.config.output_dir / split.directory, commits, self.config.rows_per_part, split.first_part
            )
            for split in SPLITS
        }
        dispatcher = Dispatcher(
            self.config.dispatch_policy(),
            self.config.endpoints,
            session,
            model,
            self.config.sampling,
            self.ledger,
            iter_rows(
                self.source,
                self.pending,
                keep_given_turns=self.config.keep_given_turns,
                start=self._input_start(),
            ),
            writers,
            self.config.client_factory,
            self.guard,
        )
        if self.config.api_key:
            dispatcher.client.authorize(self.config.api_key)
        dispatcher.client.know(self.config.secrets)
        return dispatcher

    def _input_start(self) -> InputMark | None:
        """Where reading the input for the pending rows may begin (checked unchanged at prepare)."""
        if not self.pending:
            return None
        found = self.ledger.input_mark_before(min(self.pending))
        return None if found is None else InputMark(*found)

    # -- finishing ------------------------------------------------------------

    def unfinished_in_scope(self) -> int:
        """Rows within --limit (all rows without it) that are not done or failed."""
        return sum(
            self.ledger.counts(below_position=self.config.limit)[state]
            for state in (RowState.PENDING, RowState.IN_FLIGHT)
        )

    def write_reports(self) -> JobSummary:
        """errors.jsonl and manifest.json, rewritten atomically from the ledger."""
        out = self.config.output_dir
        errors = "".join(
            json.dumps({"id": i, "attempts": a, "error": e}, ensure_ascii=False) + "\n"
            for i, a, e in self.ledger.failed_rows()
        )
        write_text_atomic(out / "errors.jsonl", errors)
        self.ledger.set_meta({RUN_ENDED_KEY: repr(time.time())})
        summary = summarize(self.ledger, running=False)  # written as the job ends: nothing is out
        meta = self.ledger.meta()
        commits = self.ledger.part_commits()
        manifest = {
            "specpilot_version": __version__,
            "input": {
                "path": meta.get("input"),
                "format": meta.get("input_format"),
                "sha256": meta.get("input_sha256"),
                "duplicates_skipped": int(meta.get("duplicates_skipped", "0")),
                "rejected": summary.rejected,
            },
            "params": {
                k: (meta[k] if k == "model" else json.loads(meta.get(k, DEFAULT_PARAMS.get(k, "null"))))
                for k in PARAM_KEYS
            },
            "counts": {
                "total": summary.total,
                "done": summary.done,
                "clean": summary.clean,
                "flagged": summary.flagged,
                "failed": summary.failed,
                "pending": summary.pending,
                "in_flight": summary.in_flight,
            },
            "tokens": {"prompt": summary.prompt_tokens, "completion": summary.completion_tokens},
            "flags": summary.flags,
            "spec_accept_length": summary.spec_accept_length,
            "parts": [
                {
                    "file": f"{path.parent.name}/{path.name}",
                    "rows": commits[p].rows,
                    "bytes": commits[p].committed_bytes,
                }
                for p, path in split_parts(out).items()
                if p in commits
            ],
            "updated_at": time.time(),
        }
        write_text_atomic(out / "manifest.json", jsontext.dumps(manifest, indent=2) + "\n")
        return summary


@dataclass(frozen=True)
class _Ran:
    stop_reason: str | None
    servers: list[ServerRun]
    #: the servers' context in tokens, where the guard needed it (its fix is bounded by it)
    context_tokens: int | None
    stalled_s: float
    #: secret values the servers echoed into answers (replaced in the rows written)
    replaced: int
    #: answers 401/403: the servers want an API key not sent
    unauthorized: int
    #: a signal stopped the dispatch
    signalled: bool


async def _run(job: Job, watch: JobWatcher | None) -> _Ran:
    config = job.config
    # a router's room grows with its workers (the dispatcher bounds what is in flight): no cap
    unbounded = any(e.router for e in config.endpoints)
    async with open_session(0 if unbounded else config.concurrency + 4) as session:
        api_key = config.api_key or os.environ.get(API_KEY_ENV)
        model = (
            config.model
            or job.ledger.meta().get("model")
            or await default_model(session, config.endpoints, api_key)
        )
        job.prepare(model)
        dispatcher = job.dispatcher(session, model)
        async with watch(dispatcher) if watch else contextlib.nullcontext():
            await dispatcher.run(_watch_runs(config.endpoints, dispatcher))
        _after_dispatch(job, dispatcher)
        servers = [ServerRun(s.name, s.done_rows, s.taken_out_count) for s in dispatcher.pool.servers]
        context = await _fix_context_tokens(job, session, api_key)
        stalled_s = dispatcher.health.pause.stalled_s(time.monotonic())
        client = dispatcher.client
        return _Ran(
            dispatcher.stop_reason, servers, context, stalled_s, client.secrets_replaced,
            client.unauthorized, dispatcher.signalled,
        )  # fmt: skip


def _after_dispatch(job: Job, dispatcher: Dispatcher) -> None:
    """Rows no server is left to send marked failed; the servers taken out for good and a
    clock jump told."""
    config = job.config
    if dispatcher.no_server_left:
        job.ledger.fail_unfinished(f"{NOT_SENT}{dispatcher.no_server_left}", config.limit)
    elif dispatcher.out_for_good:  # the others carried on: still worth a line at the end
        for why in dispatcher.out_for_good:
            config.notify(f"warning: {why}")
    if dispatcher.clock_jump_s:
        config.notify(
            f"warning: the system clock jumped by {dispatcher.clock_jump_s:+.0f} s while the job ran: "
            "the summary's elapsed_s and overall rates are off by as much"
        )


async def _fix_context_tokens(job: Job, session: aiohttp.ClientSession, api_key: str | None) -> int | None:
    """The servers' context in tokens (the guard's fix for truncated rows is bounded by it):
    as configured, else asked of the servers where the guard counted truncated rows."""
    context = job.config.context_tokens
    if job.guard is not None and job.guard.count.by_cause["truncated"] and context is None:
        context = await served_context(session, job.config.endpoints, api_key)
    return context


def _with_block_crcs(source: InputSource, marks: list[InputMark]) -> list[tuple[int, int, int, int | None]]:
    """Each mark with the crc32 of the input's bytes from it to the next mark (the last: to the
    end), read in one streamed pass; a resume told the input changed names the block."""
    if source.kind != "jsonl" or not marks:
        return [(m.position, m.offset, m.line_number, None) for m in marks]
    found: list[tuple[int, int, int, int | None]] = []
    with source.files[0].open("rb") as handle:
        for mark, following in zip(marks, [*marks[1:], None], strict=True):
            handle.seek(mark.offset)
            size = None if following is None else following.offset - mark.offset
            found.append((mark.position, mark.offset, mark.line_number, _crc_read(handle, size)))
    return found


def _crc_read(handle: BinaryIO, size: int | None) -> int:
    """The crc32 of the next `size` bytes `handle` reads (None: to the end), read in chunks."""
    crc = 0
    while size is None or size > 0:
        chunk = handle.read(CRC_CHUNK_BYTES if size is None else min(size, CRC_CHUNK_BYTES))
        if not chunk:
            break
        crc = zlib.crc32(chunk, crc)
        size = None if size is None else size - len(chunk)
    return crc


def storage_error(
    err: OSError | sqlite3.Error, output_dir: Path, input_path: Path | None, field: str = "--output"
) -> UserError:
    """A full disk, an unwritable folder, a damaged ledger or a part that is no file, as one
    line with its fix.

    The ledger only marks rows done after they are fsynced, so after any of these
    every finished row is kept and a rerun of the same command resumes.
    """
    resume = "then run the same command again to resume (finished rows are kept)"
    errno_name = getattr(err, "errno", None)
    text = str(err)
    if errno_name == errno.ENOSPC or "disk is full" in text:
        return DiskFull(f"the disk holding {output_dir} is full", field=field, fix=f"free space, {resume}")
    if isinstance(err, sqlite3.DatabaseError) and not isinstance(err, sqlite3.OperationalError):
        return UserError(
            f"the ledger {output_dir / LEDGER_FILE} is damaged ({text})",
            field=field,
            fix=f"restore it from a backup and check the folder with `specpilot verify {output_dir}`, "
            "or start over with a new --output folder",
        )
    where = Path(getattr(err, "filename", None) or output_dir)
    reason = getattr(err, "strerror", None) or text
    if errno_name == errno.EISDIR:
        return UserError(
            f"{where} is a directory, where the job keeps a file",
            field=field,
            fix=f"move it out of the way, then `specpilot verify {output_dir}` queues the rows of a "
            "part that is gone to be generated again (or run the same command: it does too)",
        )
    if input_path is not None and where.resolve().is_relative_to(input_path.resolve()):
        return UserError(
            f"reading {where} failed: {reason}", field="--input", fix="check the file is there and readable"
        )
    return UserError(
        f"reading or writing {where} failed: {reason}",
        field=field,
        fix=f"check the folder's permissions and free space, {resume}",
    )


def _watch_runs(endpoints: list[Endpoint], dispatcher: Dispatcher) -> list[Companion]:
    """A run started by `specpilot up` can die after ready; its log says so at once, so
    the job stops then with the cause instead of waiting out request timeouts."""
    names = [e.run_name for e in endpoints if e.run_name is not None]
    if not names:
        return []
    # imported here: a job without --run never loads the host (SSH) layer
    from specpilot.launch.ops import host_for
    from specpilot.launch.serving import stop_on_crash

    return [
        (stop_on_crash(name, dispatcher.stop_for, dispatcher.note, host_for), f"the watcher of run {name}")
        for name in names
    ]


async def generate_in_loop(config: JobConfig, watch: JobWatcher | None = None) -> Outcome:
    """Run (or resume) a job to its end in the command's event loop (`specpilot job` drives its
    servers beside it); the summary comes from the ledger."""
    outcome, replaced = await _generate_in_loop(config, watch)
    if replaced:
        # counted, not silent: the rows hold the marker where the server quoted a key
        return replace(
            outcome,
            message=f"{outcome.message}; {replaced} secret values the servers echoed into answers "
            f"were replaced by {CONTENT_MARKER!r} in the rows written",
        )
    return outcome


async def _generate_in_loop(config: JobConfig, watch: JobWatcher | None) -> tuple[Outcome, int]:
    """The outcome, and how many secret values the answers echoed (replaced)."""
    try:
        with Job(config) as job:
            ran = await _run(job, watch)
            summary = replace(job.write_reports(), this_run_servers=ran.servers)
            scope_left = job.unfinished_in_scope()
            lost = damaged_parts(config.output_dir, job.ledger)
    except (OSError, sqlite3.Error) as err:
        raise storage_error(err, config.output_dir, config.input_path) from err
    ending = _ending(config, job.guard, ran, summary, scope_left, lost)
    return replace(ending, stalled_s=ran.stalled_s), ran.replaced


def _ending(
    config: JobConfig,
    guard: YieldGuard | None,
    ran: _Ran,
    summary: JobSummary,
    scope_left: int,
    lost: list[str],
) -> Outcome:
    """How the run ended: the first of a stop, lost parts, failed rows, rows left, a yield
    under its floor; else done."""
    unfinished = _unfinished(config, guard, ran, summary, scope_left, lost)
    return unfinished if unfinished is not None else _finished(config, guard, ran, summary)


def _unfinished(
    config: JobConfig,
    guard: YieldGuard | None,
    ran: _Ran,
    summary: JobSummary,
    scope_left: int,
    lost: list[str],
) -> Outcome | None:
    """The ending of a run that left rows undone: a stop, lost parts, failed rows, rows left."""
    if ran.stop_reason == GUARD_STOP and guard is not None:
        message = guard.stop_message(ran.context_tokens, job=config.in_job)
        stop = {"stopped_early": True, **guard.to_json(ran.context_tokens), "message": message}
        return Outcome(summary, 1, message, stop)
    if ran.stop_reason:
        return Outcome(summary, 1, ran.stop_reason, signalled=ran.signalled)
    if lost:
        return Outcome(
            summary,
            1,
            f"{', '.join(lost)} lost rows while the job ran (deleted or cut short): "
            "run the same command again to generate them again",
        )
    if summary.failed:
        # a key not sent is the job's fault, not the rows': say so rather than "see errors.jsonl"
        key = (
            f" ({ran.unauthorized} answers were {_UNAUTHORIZED}: the servers want an API key; {KEY_FIX})"
            if ran.unauthorized
            else ""
        )
        return Outcome(
            summary,
            1,
            f"{summary.failed} rows failed after all retries{key}; see {config.output_dir / 'errors.jsonl'}, "
            "then run the same command with --retry-failed to send them again",
        )
    if scope_left:
        return Outcome(summary, 1, f"{scope_left} rows are not done")
    return None


def _finished(config: JobConfig, guard: YieldGuard | None, ran: _Ran, summary: JobSummary) -> Outcome:
    """The ending of a run that did every row in scope: a yield under its floor, or done."""
    rejected = (
        f"; {summary.rejected} input rows were rejected (see {config.output_dir / REJECTED_FILE})"
        if summary.rejected
        else ""
    )
    under = _under_floor(config, summary, guard, ran.context_tokens)
    if under is not None and not config.in_job:
        return Outcome(summary, 1, *under)
    beyond = summary.pending + summary.in_flight
    if config.limit is not None and beyond:
        # the job is incomplete by design: the rest of the input is outside --limit
        return Outcome(
            summary,
            0,
            f"the first {config.limit:,} input rows are done (--limit {config.limit}); {beyond:,} more "
            f"are in the input: the same command without --limit does them{rejected}",
        )
    # `job` exports first, then ends non-zero with the export's row counts (`under`'s message)
    return Outcome(summary, 0, f"all {summary.done} rows done{rejected}", under and under[1])


def _under_floor(
    config: JobConfig, summary: JobSummary, guard: YieldGuard | None, context_tokens: int | None
) -> tuple[str, dict[str, Any]] | None:
    """(message, numbers) of a job that finished every row with a clean share under its floor:
    no "done" without a dataset. Judged once it holds the rows the guard needs to judge (every
    row is measured then: no bound); `job` judges its whole dataset whatever its size."""
    share = _judged_under_floor(config, summary)
    if share is None:
        return None
    floor = config.yield_floor
    by_cause = summary.by_cause or {}
    cause = max(by_cause, key=lambda name: by_cause[name])
    says = cause_named(cause).says
    budget = guard.budget(context_tokens) if guard is not None and guard.lengths else None
    message = (
        f"every row was processed, but only {summary.clean:,} of {summary.done:,} are clean ({share:.1%}), "
        f"under the floor of {floor.min_clean_pct:g}% "
        f"({floor_setting(config.in_job)}): {summary.counts_text()}. "
        f"Most flagged rows are {says}: {fix_for(cause, budget, job=config.in_job)}"
    )
    stop = {
        "stopped_early": False, "judged": summary.done, "clean": summary.clean,
        "clean_share": round(share, 4), "by_cause": by_cause, **floor.to_json(), "main_cause": cause,
        "lengths": None if budget is None else budget.to_json(), "message": message,
    }  # fmt: skip
    return message, stop


def _judged_under_floor(config: JobConfig, summary: JobSummary) -> float | None:
    """The clean share when it is under the floor and the job holds the rows to judge it."""
    floor = config.yield_floor
    share = summary.clean_share
    if not floor.on or share is None or share * 100 >= floor.min_clean_pct:
        return None
    if not config.in_job and summary.done < floor.rows_to_judge(summary.total):
        return None
    return share
