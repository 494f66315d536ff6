"""Line-by-line classification of an engine log against its signatures.

Pure and synchronous (no I/O, no clock): the supervisor feeds lines as they
arrive and asks for the verdict; tests feed recorded logs.

Why a block and not a grep: the user needs the whole error (every traceback of a
multi-process failure: the scheduler's or EngineCore's root cause *and* the parent's
follow-up), and the cause is decided over that whole text with the most specific
signature first, so "CUDA out of memory" inside an "Engine core initialization
failed" is an OOM, not a crash.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass

from specpilot.engines import registry
from specpilot.engines.adapter import Engine
from specpilot.engines.fix import Fix
from specpilot.engines.loglines import ANSI, LogReading
from specpilot.engines.signatures import SHARED, Kind, Signature, SignatureFix
from specpilot.launch.allocations import REPORTED, allocations
from specpilot.launch.outcome import describe_returncode

#: every signature: engine-specific ones before the shared ones
ALL: tuple[Signature, ...] = (*(sig for engine in registry.ENGINES for sig in engine.signatures), *SHARED)
#: what wraps an engine's own line, possibly nested: `docker compose` service prefixes
#: ("sglang-1  | "), Ray / vLLM process prefixes ("(VllmWorker TP0 pid=77) "), torch's
#: "[rank0]: " and SGLang's "[2025-01-01 10:00:00 TP0] " rank tags
_WRAPPERS = re.compile(
    r"^(?:[A-Za-z0-9][\w.-]*\s+\|\s?"
    r"|\([^()]*\bpid=\d+[^()]*\)\s*"
    r"|\[rank\d+\]:\s*"
    r"|\[(?:[^\]]*\s)?(?:TP|DP|PP|EP|CP)\d+(?:\s[^\]]*)?\]\s*)+"
)
_TRACEBACK_START = re.compile(r"Traceback \(most recent call last\):")
_WARNING_LEVEL = re.compile(r"\bWARN(?:ING)?\b")
#: an engine that reports an error it handled and goes on (an optional endpoint it could not
#: build: SGLang's Responses API without `openai_harmony`); the traceback that follows, up to
#: the next timestamped record, is not a failure
_HANDLED = re.compile(r"Can not initialize \w+, error:|disabled: \w+ init failed")
_RECORD_START = re.compile(r"^\[\d{4}-\d\d-\d\d[ T]")
_INFO_LEVEL = re.compile(r"\bINFO\b")
#: how many lines before the first traceback line still belong to the error (context)
_LEAD_LINES = 1


def engine_text(line: str) -> str:
    """The engine's own text of a log line: without colours and without the prefixes a
    container runtime, Ray or a rank tag put in front, so signatures match it the same."""
    return _WRAPPERS.sub("", ANSI.sub("", line))


def for_engine(engine: Engine) -> tuple[Signature, ...]:
    """The signatures that apply to `engine`, engine-specific before shared ones."""
    return engine.signatures + SHARED


@dataclass(frozen=True)
class Failure:
    """Why a start failed: the cause class, the signature, the full error, the fix."""

    cause: str
    signature: str | None
    error: str
    fix: Fix | None


@dataclass
class LineEvent:
    """What one line meant."""

    kind: Kind | None
    name: str | None = None


class LogClassifier:
    """Feeds on log lines; knows the phase, the allocations, readiness and failure."""

    def __init__(
        self, engine: Engine, signatures: tuple[Signature, ...] | None = None, *, serving: bool = False
    ) -> None:
        """`engine`: whose log it is (the command looked it up once); `serving`: the log after
        ready, where a failed request may log an error and a traceback while the server serves
        on; only a line that ends serving is fatal."""
        self.engine = engine
        self._signatures = signatures if signatures is not None else for_engine(engine)
        self._fatal = [s for s in self._signatures if s.kind is Kind.FATAL]
        self._triggers = [s for s in self._fatal if s.ends_serving] if serving else self._fatal
        self._serving = serving
        self._other = [s for s in self._signatures if s.kind is not Kind.FATAL]
        self.lines: list[str] = []  # as printed (the error shown is these)
        self._plain: list[str] = []  # engine_text of each (what signatures see)
        self.phase: str = "starting"
        self.last_meaningful_line: str | None = None
        self._reading = LogReading(engine.log.quantities)
        self.ready_seen = False
        self.fatal_index: int | None = None  # index of the line that said "this failed"
        self._block_start: int | None = None
        self._handled = False  # inside an error report the engine handled (see _HANDLED)
        self._recent: deque[str] = deque(maxlen=50)

    @property
    def allocations(self) -> dict[str, int | float]:
        """The numbers `up` reports, read as calibration reads them (first printing wins)."""
        return allocations(self._reading.values)

    @property
    def fatal_seen(self) -> bool:
        return self.fatal_index is not None

    def feed(self, printed: str) -> LineEvent:
        """Classify one line (without its newline)."""
        index = len(self.lines)
        line = engine_text(printed)
        self.lines.append(printed)
        self._plain.append(line)
        self._recent.append(printed)
        if line.strip():
            self.last_meaningful_line = printed
        # every line, as calibration reads a saved log (the reader sees the rank tags)
        read = [name for name, key in REPORTED.items() if key in self._reading.feed(printed)]
        if _HANDLED.search(line):
            self._handled = True
        elif self._handled and (_RECORD_START.search(line) or _RECORD_START.search(printed)):
            self._handled = False
        if self._handled:
            return LineEvent(kind=None)
        if _TRACEBACK_START.search(line) and self._block_start is None:
            self._block_start = max(0, index - _LEAD_LINES)
        elif self._serving and self.fatal_index is None and _INFO_LEVEL.search(line):
            self._block_start = None  # a request's traceback was handled: the server served on
        event = LineEvent(Kind.ALLOCATION, read[0]) if read else LineEvent(kind=None)
        for sig in self._other:
            if sig.regex.search(line) is None:
                continue
            if sig.kind is Kind.PROGRESS:
                self.phase = sig.name
                self._block_start = None  # an earlier traceback was handled: the engine moved on
                event = LineEvent(Kind.PROGRESS, sig.name)
            elif sig.kind is Kind.READY:
                self.ready_seen = True
                self.phase = "ready"
                event = LineEvent(Kind.READY, sig.name)
        if self.fatal_index is None and self._is_fatal_line(line):
            self.fatal_index = index
            event = LineEvent(Kind.FATAL, None)
        return event

    def _is_fatal_line(self, line: str) -> bool:
        in_block = self._block_start is not None
        if not in_block and _WARNING_LEVEL.search(line):
            return False  # an engine warning that mentions an error type is not a failure
        return any(sig.regex.search(line) for sig in self._triggers)

    def failure(self, *, exited: bool, exit_code: int | None = None) -> Failure:
        """The verdict over everything seen so far, for a start that failed.

        `exited` says the process is gone; without any fatal line that is a crash
        whose error is the log's tail.
        """
        if self.fatal_index is None:
            tail = "\n".join(list(self._recent)[-30:])
            how = "exited" if exit_code is None else describe_returncode(exit_code)
            what = (
                f"the engine process {how} without a known error line"
                if exited
                else ("the engine stopped without a known error line")
            )
            return Failure("crash", None, f"{what}; last lines:\n{tail}".rstrip(), None)
        start = self.fatal_index
        if self._block_start is not None and self._block_start < start:
            start = self._block_start
        error = "\n".join(self.lines[start:]).rstrip()
        plain = "\n".join(self._plain[start:])
        for sig in self._fatal:
            match = sig.regex.search(plain)
            if match:
                return Failure(sig.cause or "unknown", sig.name, error, _render_fix(sig.fix, match))
        return Failure("unknown", None, error, None)


def _render_fix(fix: SignatureFix | None, match: re.Match[str]) -> Fix | None:
    """Fill `{group}` placeholders of the fix from the regex's named groups."""
    if fix is None:
        return None
    groups = {k: (v or "").strip() for k, v in match.groupdict().items()}

    def fill(text: str) -> str:
        try:
            return text.format(**groups)
        except (KeyError, IndexError):
            return text

    return Fix(
        text=fill(fix.text),
        args=tuple(fill(a) for a in fix.args),
        env={k: fill(v) for k, v in fix.env.items()},
    )
