"""job.json: the job's stages, what each decided and why, and the inputs they were decided on.

Written atomically after every change, so a job killed at any point resumes from the last
stage it finished. The inputs (server spec, prompts, options) are hashed; a rerun whose
inputs differ from the ones a finished stage used is refused with the field and the stage
to restart from, before anything starts or is written.
"""

from __future__ import annotations

import errno
import hashlib
import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specpilot import __version__, jsontext
from specpilot.atomic import write_text_atomic
from specpilot.errors import DiskFull, UserError
from specpilot.job.schema import STAGES, read_record
from specpilot.job.spec import JobFile
from specpilot.secrets import mask_tree

if TYPE_CHECKING:
    from specpilot.generate.ledger.store import Ledger

JOB_RECORD = "job.json"
#: an input that changed, and the stage a rerun has to restart from for it (None: the ledger
#: holds rows generated from it, so the job cannot go on in this folder)
INPUT_FIELDS: dict[str, tuple[str, str | None]] = {
    "serving": ("[job] server / fleet (or the spec it names)", "check"),
    "bench": ("[job.bench]", "bench"),
    "prompts": ("[job] prompts", None),
    "sampling": ("[job.sampling]", None),
    "export": ("[job] export / include_flagged", "export"),
}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _json_sha(value: object) -> str:
    return _sha256(json.dumps(value, sort_keys=True).encode())


def serving_bytes(job: JobFile) -> bytes:
    """The server spec, or the fleet file and the server spec it names, as they are now."""
    if job.server is not None:
        return job.server.read_bytes()
    from specpilot.fleet.spec import load_fleet

    fleet = load_fleet(job.serving_file)
    spec_path = fleet.server.source_path
    return job.serving_file.read_bytes() + (spec_path.read_bytes() if spec_path is not None else b"")


def prompts_fingerprint(path: Path) -> dict[str, Any]:
    """Size and mtime (cheap), and the content hash that decides when they differ."""
    from specpilot.generate.rows.inputs import resolve_input

    source = resolve_input(path)
    return {"fingerprint": source.fingerprint(), "sha256": None, "path": str(path)}


def input_hashes(job: JobFile) -> dict[str, Any]:
    options = job.options_json()
    return {
        "serving": _sha256(serving_bytes(job)),
        "bench": _json_sha(options["bench"]),
        "prompts": prompts_fingerprint(job.prompts),
        "sampling": _json_sha(options["sampling"]),
        # include_flagged only when set: a job begun before the key existed hashes as it did
        "export": _json_sha(
            {"formats": options["export"], "include_flagged": True}
            if job.include_flagged
            else options["export"]
        ),
    }


def _prompts_same(recorded: dict[str, Any], now: dict[str, Any], path: Path) -> bool:
    if recorded.get("fingerprint") == now["fingerprint"] and recorded.get("path") == now["path"]:
        return True
    if recorded.get("sha256") is None:  # the job never read them: nothing to tell a change from
        return False
    from specpilot.generate.rows.inputs import resolve_input

    return bool(recorded["sha256"] == resolve_input(path).sha256())


@dataclass
class JobRecord:
    path: Path
    data: dict[str, Any]
    #: the secret values of the job's server specs: job.json holds none of them (`save`)
    secrets: list[str] = field(default_factory=list, repr=False)
    #: what reading the record found and corrected: said once the job runs
    said: list[str] = field(default_factory=list)

    # -- reading --------------------------------------------------------------

    def stage(self, name: str) -> dict[str, Any]:
        stages: dict[str, dict[str, Any]] = self.data.setdefault("stages", {})
        return stages.setdefault(name, {"status": "pending"})

    def done(self, name: str) -> bool:
        return self.stage(name).get("status") in ("done", "skipped")

    def first_unfinished(self) -> str | None:
        return next((s for s in STAGES if not self.done(s)), None)

    # -- writing --------------------------------------------------------------

    def save(self) -> None:
        self.data["updated_at"] = time.time()
        # one pass over every stage's evidence, restart and reason: an argv's secret flag values,
        # the specs' secret values, a credential in an engine's line; strict JSON: a number that
        # is not finite is null, and `null_reasons` says why
        try:
            write_text_atomic(self.path, jsontext.dumps(mask_tree(self.data, self.secrets), indent=2) + "\n")
        except OSError as err:
            raise folder_error(err, self.path) from None

    def begin(self, name: str, gpus: int) -> None:
        """The stage starts (again): when, and how many GPUs the job holds meanwhile. An attempt
        a kill ended counts up to its last heartbeat (`seen_at`)."""
        stage = self.stage(name)
        if stage.get("status") == "running" and "started_at" in stage:
            lost_s = max(0.0, float(stage.get("seen_at", stage["started_at"])) - float(stage["started_at"]))
            self._add_time(stage, lost_s)
            stage["interrupted_s"] = round(float(stage.get("interrupted_s", 0.0)) + lost_s, 3)
        stage.pop("seen_at", None)
        stage.update(status="running", started_at=time.time(), gpus=gpus)
        stage["attempts"] = int(stage.get("attempts", 0)) + 1
        self.save()

    def finish(self, name: str, evidence: dict[str, Any], status: str = "done") -> None:
        """The stage ended: what it decided, and the GPU-hours of this attempt added to its own."""
        stage = self.stage(name)
        now = time.time()
        self._add_time(stage, max(0.0, now - float(stage.get("started_at", now))))
        stage.pop("seen_at", None)
        stage.update(status=status, finished_at=now, evidence=evidence)
        self.save()

    def heartbeat(self, name: str) -> None:
        """The stage still runs now: what an attempt a kill ends is counted up to."""
        self.stage(name)["seen_at"] = time.time()
        self.save()

    @staticmethod
    def _add_time(stage: dict[str, Any], wall_s: float) -> None:
        stage["wall_s"] = round(float(stage.get("wall_s", 0.0)) + wall_s, 3)
        stage["gpu_hours"] = round(
            float(stage.get("gpu_hours", 0.0)) + wall_s * int(stage.get("gpus", 0)) / 3600, 6
        )

    def fail(self, name: str, reason: str) -> None:
        """The stage failed: its attempt's GPU-hours count, also as `failed_gpu_hours`."""
        stage = self.stage(name)
        if stage.get("status") == "running" and "started_at" in stage:
            wall_s = max(0.0, time.time() - float(stage["started_at"]))
            self._add_time(stage, wall_s)
            failed_h = float(stage.get("failed_gpu_hours", 0.0)) + wall_s * int(stage.get("gpus", 0)) / 3600
            stage["failed_gpu_hours"] = round(failed_h, 6)
            stage.pop("seen_at", None)
        stage.update(status="failed", reason=reason)
        self.save()

    def note(self, key: str, entry: dict[str, Any]) -> None:
        """An event of the job (a restart, a bound applied), appended under `key`."""
        self.data.setdefault(key, []).append({"at": time.time(), **entry})
        self.save()

    def reopen(self, name: str) -> None:
        """A finished stage runs again on this attempt; what earlier attempts spent stays counted."""
        stage = self.stage(name)
        if stage.get("status") in ("done", "failed"):
            stage["status"] = "pending"

    def reset_from(self, name: str) -> None:
        """`--restart-from NAME`: that stage and every later one run again."""
        for stage in STAGES[STAGES.index(name) :]:
            self.data.setdefault("stages", {})[stage] = {"status": "pending"}

    def gpu_hours(self) -> dict[str, float]:
        return {s: float(self.stage(s).get("gpu_hours", 0.0)) for s in STAGES}


def open_record(job: JobFile) -> tuple[JobRecord, list[tuple[str, str]]]:
    """The job folder's record (or a new one, not yet written) and the inputs that changed
    since its finished stages used them: (input key, the stage it restarts from).

    Refused (UserError, nothing written): a folder holding another job's record, or a
    generate ledger no job began."""
    from specpilot.generate.ledger.store import LEDGER_FILE

    path = job.output / JOB_RECORD
    hashes = input_hashes(job)
    if not path.exists():
        if (job.output / LEDGER_FILE).exists():
            raise UserError(
                f"{job.output} holds a generate job that this job did not begin",
                field="[job] output",
                fix="give the job its own folder (or resume that one with `specpilot generate`)",
            )
        record = JobRecord(path, {"specpilot_version": __version__, "job_file": str(job.path)})
        record.data["inputs"] = hashes
        return record, []
    data = read_record(path)
    if data.get("job_file") != str(job.path):
        raise UserError(
            f"{job.output} belongs to the job {data.get('job_file')}",
            field="[job] output",
            fix="give this job its own folder, or run that job file",
        )
    record = JobRecord(path, data)
    recorded = data.get("inputs") or {}
    lacking = [key for key in INPUT_FIELDS if recorded.get(key) is None]
    if lacking:
        # nothing to tell a change from: not a change (begin records them as they are now)
        record.said.append(
            f"{path} lacks its record of the inputs ({', '.join(lacking)}): they are hashed again "
            "as they are now, so a change made to them since cannot be told"
        )
    changed: list[tuple[str, str]] = []
    for key, (_, restart) in INPUT_FIELDS.items():
        if key in lacking:
            continue
        if key == "prompts":
            same = _prompts_same(recorded.get(key, {}), hashes[key], job.prompts)
        else:
            same = recorded.get(key) == hashes[key]
        if not same:
            changed.append((key, restart or ""))
    settle_with_ledger(record, job.output)
    return record, changed


def refuse_changes(record: JobRecord, changed: list[tuple[str, str]], restart_from: str | None) -> None:
    """A changed input of a finished stage, unless `--restart-from` covers it: one line naming it."""
    for key, restart in changed:
        field, _ = INPUT_FIELDS[key]
        if not restart:
            if record.stage("generate").get("status") == "pending" and not record.done("up"):
                continue  # no row generated yet: the job takes the new input
            raise UserError(
                "changed since the job began, and its ledger holds rows generated from the old one",
                field=field,
                fix="restore the original, or give the job a new [job] output folder",
            )
        if not record.done(restart) and record.stage(restart).get("status") == "pending":
            continue  # that stage has not run yet: it uses the new input
        if restart_from is not None and STAGES.index(restart_from) <= STAGES.index(restart):
            continue
        raise UserError(
            f"changed since the {restart} stage ran",
            field=field,
            fix=f"rerun with `--restart-from {restart}` to redo it and what follows, or restore the original",
        )


def exports_of(data: dict[str, Any]) -> dict[str, int]:
    """Rows in each export a job's record says it wrote (those a kill left done, too)."""
    export = data.get("stages", {}).get("export", {})
    formats = export.get("evidence", {}).get("formats") or export.get("formats") or {}
    return {fmt: int(done.get("rows", 0)) for fmt, done in formats.items()}


def read_exports(directory: Path) -> dict[str, int] | None:
    """`exports_of` the job folder's job.json; None where the folder holds no job's record."""
    try:
        return exports_of(json.loads((directory / JOB_RECORD).read_text(encoding="utf-8")))
    except (OSError, ValueError, AttributeError):
        return None


def pin_prompts(record: JobRecord, job: JobFile) -> None:
    """The prompts' content hash as the job first reads them: what a later change is told from."""
    from specpilot.generate.rows.inputs import resolve_input

    prompts = record.data["inputs"]["prompts"]
    if prompts.get("sha256") is None:
        prompts["sha256"] = resolve_input(job.prompts).sha256()


def settle_with_ledger(record: JobRecord, output: Path) -> None:
    """What generate keeps itself is checked before anything starts: the ledger opens, and each
    part is a file. A generate the record has as finished is checked against them too: every
    row done in the ledger, each committed part there at its committed size (one stat per
    part). The ledger wins: generate runs again for what is missing, and the stages after it;
    the correction is said (`record.said`) and saved by `begin`."""
    from specpilot.generate.ledger.store import LEDGER_FILE, RowState
    from specpilot.generate.writers.parts import SPLITS, damaged_parts, split_parts

    for split in SPLITS:
        folder = output / split.directory
        if folder.exists() and not folder.is_dir():
            raise UserError(
                f"{folder} is a file, where the job keeps the parts of its rows (a folder)",
                field="[job] output",
                fix=f"move it out of the way, then `specpilot verify {output}` queues the rows of its "
                "parts to be generated again (or run the same command: the job does)",
            )
    for part in split_parts(output).values():
        if not part.is_file():
            raise part_error(part, output)
    ledger_path = output / LEDGER_FILE
    if not ledger_path.exists():
        if record.done("generate"):
            _generate_again(record, f"{output} holds no ledger ({LEDGER_FILE})")
        return
    ledger = open_ledger(output)
    try:
        counts = ledger.counts()
        lost = damaged_parts(output, ledger) if record.done("generate") else []
    except sqlite3.DatabaseError as err:
        raise ledger_error(err, output) from None
    finally:
        ledger.close()
    done, total = counts[RowState.DONE], sum(counts.values())
    if not record.done("generate"):
        return
    if lost:
        _generate_again(record, f"{', '.join(lost)} lost rows since (deleted or cut short)")
    elif done < total or not total:
        _generate_again(record, f"its ledger has {done:,} of {total:,} rows done")


def _generate_again(record: JobRecord, why: str) -> None:
    record.said.append(
        f"{record.path} says generate is done, but {why}: the ledger wins, generate runs again "
        "(and the stages after it); job.json is corrected"
    )
    for name in STAGES[STAGES.index("generate") :]:
        stage = record.stage(name)  # its time and attempts so far stay counted
        stage["status"] = "pending"
        stage.pop("formats", None)  # every export is written again


def part_error(part: Path, output: Path) -> UserError:
    kind = "a directory" if part.is_dir() else "not a regular file"
    return UserError(
        f"{part} is {kind}, where the job keeps a part of its rows",
        field="[job] output",
        fix=f"move it out of the way, then `specpilot verify {output}` queues its rows to be "
        "generated again (or run the same command: the job does)",
    )


def open_ledger(output: Path) -> Ledger:
    """The job's ledger, read-only; a damaged one is one line naming it (UserError)."""
    from specpilot.generate.ledger.store import Ledger

    try:
        ledger = Ledger.in_dir(output, readonly=True)
        ledger.meta()  # the first read: a file that is no SQLite database fails here
    except sqlite3.DatabaseError as err:
        raise ledger_error(err, output) from None
    return ledger


def ledger_error(err: sqlite3.DatabaseError, output: Path) -> UserError:
    from specpilot.generate.ledger.store import LEDGER_FILE

    return UserError(
        f"the ledger {output / LEDGER_FILE} is damaged ({err})",
        field="[job] output",
        fix=f"restore it from a backup and check the folder with `specpilot verify {output}`, "
        "or give the job a new [job] output folder",
    )


def make_folder(output: Path) -> None:
    """The job folder, created if need be; one that cannot be is one line naming it."""
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise folder_error(err, output) from None


def folder_error(err: OSError, path: Path) -> UserError:
    """A full disk or a folder that cannot be written (read-only mount, permissions), as one line
    naming the file: finished stages and rows are kept, so the same command resumes."""
    resume = (
        "then run the same command again to resume (finished stages and rows are kept; "
        f"`specpilot verify {path.parent}` checks the rows)"
    )
    if err.errno == errno.ENOSPC:
        full = f"the disk holding {path} is full"
        return DiskFull(full, field="[job] output", fix=f"free space, {resume}")
    return UserError(
        f"cannot write {path} ({err.strerror or err})",
        field="[job] output",
        fix=f"give the job a folder it can write (--output), or make this one writable, {resume}",
    )
