"""The job file: one `[job]` table naming everything from a server spec to the dataset.

    [job]
    server = "server.toml"        # or fleet = "fleet.toml"
    prompts = "prompts.jsonl"
    output = "out"                # the job folder: job.json, the ledger, data/, the exports
    export = ["specforge"]        # formats written at the end
    include_flagged = false       # true: the exports keep flagged rows (truncated, say) too
    keep_servers = false          # true: leave what the job started running at the end
    max_restarts = 3              # restarts per engine that dies while the job runs
    concurrency = 64              # requests in flight per server (per worker behind a router)
    train_check = true            # false: the exports skip the train-ready check (export --no-train-check)
    stall_after_s = 300           # optional: no token progress this long is a stall (restarted)
    min_clean_yield = 80          # percent of rows that must come back clean (0: the guard off)
    guard_min_rows = 200          # finished rows the yield guard waits for before judging
    [job.sampling]                # generate's sampling flags, by their names
    max_tokens = 4096             # or "auto": from the bench's answer lengths, within the context
    [job.bench]                   # optional: measure variants first, start the winner
    sample = 64
    variants = "plain,NEXTN:2"
    budget_s = 300

Relative paths are relative to the job file. Every mistake is one `UserError` naming the
field, before anything starts or is written.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specpilot.errors import UserError
from specpilot.export.formats import FORMATS, format_named
from specpilot.generate.sampling import Sampling, SamplingInput, SamplingRefused, flag
from specpilot.generate.yields import (
    DEFAULT_GUARD_MIN_ROWS,
    DEFAULT_MIN_CLEAN_YIELD_PCT,
    YieldFloor,
    check_floor,
    check_min_rows,
)

DEFAULT_MAX_RESTARTS = 3
DEFAULT_CONCURRENCY = 64
#: generate's --give-up-after-s default: an hour of every server down or answering only 429/503
DEFAULT_GIVE_UP_AFTER_S = 3600.0
_JOB_KEYS = {
    "server", "fleet", "prompts", "output", "export", "include_flagged", "keep_servers", "max_restarts",
    "concurrency", "sampling", "bench", "train_check", "stall_after_s", "give_up_after_s", "min_clean_yield",
    "guard_min_rows",
}  # fmt: skip
#: [job.sampling] max_tokens = "auto": the job picks it (`pipeline`)
AUTO = "auto"
_BENCH_KEYS = {"sample", "variants", "budget_s"}
#: the flags (and export's DIR) of the commands a job runs for it, as the job file's keys
_KEY_OF_FLAG = {
    "--input": "[job] prompts", "--prompts": "[job] prompts", "--output": "[job] output",
    "--job": "[job] output", "--to": "[job] output", "DIR": "[job] output", "--format": "[job] export",
    "--include-flagged": "[job] include_flagged", "--concurrency": "[job] concurrency",
    "--sample": "[job.bench] sample", "--variants": "[job.bench] variants",
    "--budget-s": "[job.bench] budget_s",
    **{flag(key): f"[job.sampling] {key}" for key in SamplingInput.model_fields},
}  # fmt: skip
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]*(?![\w-])")


@dataclass(frozen=True)
class BenchSection:
    """`[job.bench]`: `bench`'s --sample, --variants and --budget-s."""

    sample: int = 64
    variants: str | None = None
    budget_s: float = 300.0

    def to_json(self) -> dict[str, Any]:
        return {"sample": self.sample, "variants": self.variants, "budget_s": self.budget_s}


@dataclass(frozen=True)
class JobFile:
    path: Path
    server: Path | None
    fleet: Path | None
    prompts: Path
    output: Path
    export: tuple[str, ...] = ()
    include_flagged: bool = False
    keep_servers: bool = False
    max_restarts: int = DEFAULT_MAX_RESTARTS
    concurrency: int = DEFAULT_CONCURRENCY
    #: generate's --stall-after-s (None: the bound is measured)
    stall_after_s: float | None = None
    #: generate's --give-up-after-s: every server down, or every request answered 429/503, this long
    #: ends the job
    give_up_after_s: float = DEFAULT_GIVE_UP_AFTER_S
    sampling: Sampling = field(default_factory=lambda: Sampling(thinking=True))
    bench: BenchSection | None = None
    train_check: bool = True
    yield_floor: YieldFloor = field(default_factory=YieldFloor)
    #: max_tokens = "auto": the job picks it from the bench's answer lengths within the context
    max_tokens_auto: bool = False
    #: --retry-truncated (this run only): the rows cut at the old max_tokens are sent again
    retry_truncated: bool = False

    @property
    def serving_file(self) -> Path:
        """The server spec or the fleet file the job starts."""
        path = self.server or self.fleet
        assert path is not None  # load_job refuses a job with neither
        return path

    def options_json(self) -> dict[str, Any]:
        """What the job does with its inputs, as hashed into job.json (paths are inputs of their own)."""
        sampling = self.sampling.to_json()
        if self.max_tokens_auto:
            sampling["max_tokens"] = AUTO
        return {
            "export": list(self.export),
            "sampling": sampling,
            "bench": None if self.bench is None else self.bench.to_json(),
        }


@contextmanager
def job_terms() -> Iterator[None]:
    """Refusals raised within name the job file's keys (`in_job_terms`)."""
    try:
        yield
    except UserError as err:
        raise in_job_terms(err) from None


def in_job_terms(err: UserError) -> UserError:
    """A refusal of a command the job ran for it (generate, bench, export) naming the job file's
    keys where it named that command's flags: `[job] prompts`, not `--input`."""

    def key(match: re.Match[str]) -> str:
        return _KEY_OF_FLAG.get(match.group(), match.group())

    field = _KEY_OF_FLAG.get(err.field, err.field) if err.field else None
    fix = _FLAG.sub(key, err.fix) if err.fix else None
    return type(err)(_FLAG.sub(key, err.message), field=field, fix=fix)  # a DiskFull stays one


def _bad(key: str, message: str, fix: str) -> UserError:
    return UserError(message, field=f"[job] {key}", fix=fix)


#: a key's type as the refusal says it ("a int" read badly; "a float" asks for 64 bits)
_KIND_WORDS: dict[type, str] = {int: "whole number", float: "number", str: "string"}


def _typed(table: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    value = table[key]
    ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        ok, value = True, float(value)
    if not ok:
        named = _KIND_WORDS.get(kind, kind.__name__)
        raise UserError(f"must be a {named}, got {value!r}", field=f"{where} {key}", fix=f"write a {named}")
    if kind is float and not math.isfinite(value):  # TOML reads inf and nan; no engine does
        raise UserError(
            f"must be a finite number, got {value!r}", field=f"{where} {key}", fix="write a number"
        )
    return value


def _path(base: Path, table: Mapping[str, Any], key: str, *, must_exist: bool, fix: str) -> Path:
    value = table[key]
    if not isinstance(value, str) or not value.strip():
        raise _bad(key, f"must be a path, got {value!r}", fix)
    path = Path(value).expanduser()
    path = (path if path.is_absolute() else base / path).resolve()
    if must_exist and not path.exists():
        raise _bad(key, f"{path} does not exist", fix)
    return path


def _sampling(table: Mapping[str, Any]) -> tuple[Sampling, bool]:
    """`[job.sampling]` through the schema generate's flags are made from (the same ranges, the same
    words), and whether its max_tokens is "auto"."""
    known = list(SamplingInput.model_fields)
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise UserError(
            f"unknown key {unknown[0]!r}", field="[job.sampling]", fix=f"use one of {', '.join(known)}"
        )
    auto = table.get("max_tokens") == AUTO
    try:
        values = SamplingInput.read(
            {k: v for k, v in table.items() if not (auto and k == "max_tokens")}, typed=True
        )
    except SamplingRefused as err:
        raise UserError(err.message, field=f"[job.sampling] {err.key}") from None
    return values.sampling(dict(sorted(values.request_fields().items()))), auto


def _bench(table: Mapping[str, Any]) -> BenchSection:
    unknown = sorted(set(table) - _BENCH_KEYS)
    if unknown:
        raise UserError(
            f"unknown key {unknown[0]!r}", field="[job.bench]", fix=f"use {', '.join(sorted(_BENCH_KEYS))}"
        )
    bench = BenchSection()
    if "sample" in table:
        bench = replace(bench, sample=_typed(table, "sample", int, "[job.bench]"))
    if "variants" in table:
        bench = replace(bench, variants=_typed(table, "variants", str, "[job.bench]"))
    if "budget_s" in table:
        bench = replace(bench, budget_s=_typed(table, "budget_s", float, "[job.bench]"))
    if bench.sample < 1 or bench.budget_s <= 0:
        raise UserError(
            "sample must be at least 1 and budget_s more than 0",
            field="[job.bench]",
            fix="raise it",
        )
    return bench


def load_job(path: Path, overrides: Mapping[str, Any] | None = None) -> JobFile:
    """The job file at `path`, with `overrides` (flag values by `[job]` key) in place of its own."""
    table = _job_table(path)
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    max_tokens = given.pop("max_tokens", None)  # --max-tokens: [job.sampling]'s
    retry_truncated = bool(given.pop("retry_truncated", False))
    table = {**table, **given}
    base = path.resolve().parent
    serving_key, serving = _serving(base, table)
    for key in ("prompts", "output"):
        if key not in table:
            raise _bad(key, "missing", f'add {key} = "..." to [job]')
    prompts = _path(base, table, "prompts", must_exist=True, fix="give the prompts file's path")
    output = _path(base, table, "output", must_exist=False, fix="give the job folder's path")
    export = _exports(table)
    keep = _optional(table, "keep_servers", bool, False)
    flagged = _optional(table, "include_flagged", bool, False)
    restarts, concurrency, stall_after_s = _limits(table)
    give_up_after_s = _seconds(table, "give_up_after_s")
    sampling, bench = _subtables(table, max_tokens)
    floor = _yield_floor(table)
    job_sampling, max_tokens_auto = _sampling(sampling)
    return JobFile(
        path=path.resolve(),
        server=serving if serving_key == "server" else None,
        fleet=serving if serving_key == "fleet" else None,
        prompts=prompts,
        output=output,
        export=tuple(dict.fromkeys(export)),
        include_flagged=flagged,
        keep_servers=keep,
        max_restarts=restarts,
        concurrency=concurrency,
        stall_after_s=stall_after_s,
        give_up_after_s=DEFAULT_GIVE_UP_AFTER_S if give_up_after_s is None else give_up_after_s,
        sampling=job_sampling,
        max_tokens_auto=max_tokens_auto,
        bench=None if bench is None else _bench(bench),
        train_check=_optional(table, "train_check", bool, True),
        yield_floor=floor,
        retry_truncated=retry_truncated,
    )


def _job_table(path: Path) -> dict[str, Any]:
    """The file's one `[job]` table, its keys known."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise UserError(
            f"cannot read it ({err})", field=str(path), fix="pass a job .toml with a [job] table"
        ) from None
    table = data.get("job")
    if not isinstance(table, dict) or set(data) != {"job"}:
        raise UserError(
            "a job file holds one [job] table (and [job.sampling], [job.bench])",
            field=str(path),
            fix="write `[job]` with server (or fleet), prompts and output",
        )
    unknown = sorted(set(table) - _JOB_KEYS)
    if unknown:
        raise _bad(unknown[0], "unknown key", f"use one of {', '.join(sorted(_JOB_KEYS))}")
    return table


def _optional(table: Mapping[str, Any], key: str, kind: type, default: Any) -> Any:
    """`[job] key`, typed, else its default."""
    return _typed(table, key, kind, "[job]") if key in table else default


def _serving(base: Path, table: Mapping[str, Any]) -> tuple[str, Path]:
    """Which of server and fleet the job starts, and that file."""
    if ("server" in table) == ("fleet" in table):
        raise _bad(
            "server",
            "give exactly one of server (a server spec) and fleet (a fleet file)",
            "keep the one the job should start",
        )
    serving_key = "server" if "server" in table else "fleet"
    serving = _path(base, table, serving_key, must_exist=True, fix=f"give the {serving_key} file's path")
    return serving_key, serving


def _exports(table: Mapping[str, Any]) -> list[str]:
    """`[job] export`: a list of known formats."""
    export = table.get("export", [])
    if not isinstance(export, list) or not all(isinstance(f, str) for f in export):
        raise _bad(
            "export",
            f"must be a list of formats, got {export!r}",
            f"e.g. export = {list(FORMATS)[:1]}",
        )
    for fmt in export:
        format_named(fmt, field="[job] export")  # an unknown one: refused with the known ones
    return export


def _limits(table: Mapping[str, Any]) -> tuple[int, int, float | None]:
    """`[job]` max_restarts, concurrency and stall_after_s, each in its range."""
    restarts = _optional(table, "max_restarts", int, DEFAULT_MAX_RESTARTS)
    if restarts < 0:
        raise _bad("max_restarts", f"must be 0 or more, got {restarts}", "0 turns restarts off")
    concurrency = _optional(table, "concurrency", int, DEFAULT_CONCURRENCY)
    if concurrency < 1:
        raise _bad("concurrency", f"must be at least 1, got {concurrency}", "raise it")
    return restarts, concurrency, _seconds(table, "stall_after_s")


def _seconds(table: Mapping[str, Any], key: str) -> float | None:
    """`[job] key`: a number of seconds more than 0; None where the key is absent."""
    seconds: float | None = _optional(table, key, float, None)
    if seconds is not None and not 0 < seconds < float("inf"):
        raise _bad(key, f"must be more than 0 seconds, got {seconds}", "raise it")
    return seconds


def _subtables(table: Mapping[str, Any], max_tokens: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """`[job.sampling]` (with --max-tokens in place of its own) and `[job.bench]`, as tables."""
    sampling = table.get("sampling", {})
    bench = table.get("bench")
    if not isinstance(sampling, dict) or (bench is not None and not isinstance(bench, dict)):
        raise _bad("sampling", "[job.sampling] and [job.bench] are tables", "write them as [job.sampling]")
    if max_tokens is not None:
        sampling = {**sampling, "max_tokens": max_tokens}
    return sampling, bench


def _yield_floor(table: Mapping[str, Any]) -> YieldFloor:
    """`[job]` min_clean_yield and guard_min_rows, each checked as generate's flags are."""
    return YieldFloor(
        check_floor(_typed(table, "min_clean_yield", float, "[job]"), "[job] min_clean_yield")
        if "min_clean_yield" in table
        else DEFAULT_MIN_CLEAN_YIELD_PCT,
        check_min_rows(_typed(table, "guard_min_rows", int, "[job]"), "[job] guard_min_rows")
        if "guard_min_rows" in table
        else DEFAULT_GUARD_MIN_ROWS,
    )
