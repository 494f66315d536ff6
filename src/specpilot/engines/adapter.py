"""One engine, one object: everything specpilot knows of an engine, carried by its `Engine` adapter.

Each engine's package builds its adapter (`engines/<engine>/adapter.py`, `ENGINE`) from its own
tables, rules, log lines, failure signatures and metric names; `engines/registry.py` is the list
of adapters. Callers above this layer reach engine knowledge only through an adapter (or the
`EngineRelease` view of one release of it), never by importing an engine's modules by name, so a
third engine plugs in with one adapter and its planner (`specpilot.plan.planners`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from specpilot.engines.bounds import Bound
from specpilot.engines.context_len import ContextLen
from specpilot.engines.draft import DraftKnobs
from specpilot.engines.flags import ReleaseTable
from specpilot.engines.loglines import LogQuantity
from specpilot.engines.measured import MeasuredRelease
from specpilot.engines.metrics import PreemptionSignal, SpecMetric
from specpilot.engines.phases import StartupPhases
from specpilot.engines.ranges import ValueRange
from specpilot.engines.rules import Rule
from specpilot.engines.signatures import Signature
from specpilot.engines.starts import UNKNOWN_START, StartEstimate


@dataclass(frozen=True)
class EngineLog:
    """How the engine's startup log reads: the numbers it prints and the lines that tell it apart."""

    #: the numbers it prints, read by calibration and by `up` alike
    quantities: tuple[LogQuantity, ...]
    #: lines only this engine prints
    markers: tuple[re.Pattern[str], ...]
    #: lines printed once the weights are loaded (the end-of-load line or a later stage)
    loaded: tuple[re.Pattern[str], ...]
    #: the end-of-load line as a user finds it in the log
    loaded_line: str


@dataclass(frozen=True)
class LaunchCommand:
    """How a pasted launch command of this engine starts, and where it names the model."""

    #: `python -m MODULE` programs -> a subcommand that may follow the module (skipped), or ""
    modules: Mapping[str, str]
    #: the console script whose `serve` subcommand starts the server (`sglang serve ...`)
    serve_program: str
    #: whether the first positional argument is the model (`vllm serve MODEL`)
    model_positional: bool
    #: the forms a user may paste, as said when none is recognized
    examples: tuple[str, ...]
    #: the fix when a pasted command names no model
    missing_model_fix: str


@dataclass(frozen=True)
class ReleaseWindow:
    """The releases one memory arithmetic of the planner covers (one release row)."""

    #: the arithmetic as a plan's provenance names it, e.g. "SGLang 0.5.14-0.5.16"
    arithmetic: str
    #: whether a base release (no post/dev part) is inside the window
    covers: Callable[[Version], bool]


@dataclass(frozen=True, eq=False)  # identity-hashed: registry lookups are cached per adapter
class Engine:
    name: str
    #: the engine as prose names it ("SGLang")
    display_name: str
    #: the release assumed when a pasted command does not say
    newest_version: str
    #: the releases the rules and planner cover; outside them a spec is refused
    supported_releases: SpecifierSet
    #: every shipped flag table, oldest first (`engines/flags.py`)
    release_tables: Callable[[], tuple[ReleaseTable, ...]]
    #: the window of the planner's arithmetic that holds a release (its release row)
    release_window: Callable[[str], ReleaseWindow]
    #: real GPU starts the planner was compared with, kept beside the release table
    measured: tuple[MeasuredRelease, ...]
    #: the flag that names the model (spec `[model] path` renders to it)
    model_flag: str
    #: default program when `[engine] command` is not set
    default_command: tuple[str, ...]
    launch: LaunchCommand
    #: Python distributions whose installed version says which engine release a host has
    distributions: tuple[str, ...]
    #: environment variables the engine reads start with these
    env_prefixes: tuple[str, ...]
    rules: tuple[Rule, ...]
    #: removed variable -> what replaced it (said with `env-removed` findings)
    env_replacements: Mapping[str, str]
    value_ranges: Mapping[str, ValueRange]
    #: argparse dests the server reads under another field name
    field_of_dest: Mapping[str, str]
    #: the longest context the engine derives from a model's config.json
    context_len: ContextLen
    log: EngineLog
    #: the engine's own failure, progress and ready lines (the shared ones are `signatures.SHARED`)
    signatures: tuple[Signature, ...]
    #: the Prometheus series it exports about speculative decoding
    spec_metrics: tuple[SpecMetric, ...]
    #: its speculative methods and how k draft tokens are written (bench's variants)
    draft: DraftKnobs
    #: how its startup log marks phases (`plan --samples`); None: not read for this engine
    startup_phases: StartupPhases | None = None
    #: secret flags the engine also reads from an environment variable: `up` passes them
    #: there, so the value is in neither launch.sh nor the process's argv (/proc/PID/cmdline)
    secret_flag_env: Mapping[str, str] = field(default_factory=dict)
    #: its Prometheus counter of generated tokens: a job's token progress (the stall watchdog's)
    generated_tokens_metric: str | None = None
    #: its Prometheus gauge of requests running: with tokens not moving, a stall (a fleet member's)
    running_requests_metric: str | None = None
    #: the flag that makes its OpenAI API require `Authorization: Bearer KEY`: a job sends the key
    api_key_flag: str | None = None
    #: the field of the flag that sets the context in tokens (--context-length, --max-model-len);
    #: None: the engine has none, and only the model's config says
    context_field: str | None = None
    #: how it says it took running requests off for KV room (bench shows them beside a point)
    preemption: PreemptionSignal | None = None
    #: how long a start takes where this host recorded none (bench's budget)
    start: StartEstimate = UNKNOWN_START
    #: what a restart after a death of memory while serving lowers (`engines/bounds.py`); none:
    #: it is restarted as it was
    serving_bounds: tuple[Bound, ...] = ()


@dataclass(frozen=True, eq=False)
class EngineRelease:
    """One release of one engine, resolved once: what `check` and `plan` pass down."""

    engine: Engine
    #: the release as the spec writes it (`0.5.13`, read with the 0.5.13.post1 table)
    version_text: str
    version: Version
    #: the flag table this release is read with
    table: ReleaseTable

    @property
    def name(self) -> str:
        return self.engine.name

    @property
    def tables(self) -> tuple[ReleaseTable, ...]:
        return self.engine.release_tables()

    @cached_property
    def window(self) -> ReleaseWindow:
        """The planner's arithmetic for this release; a UserError outside the planned releases."""
        return self.engine.release_window(self.version_text)
