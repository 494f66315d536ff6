"""One server as its command decided to start it: made once, handed down to what starts it.

`ServerPlan` holds the spec resolved (its engine release looked up once, its model read once,
check's evaluation of its flags), check's and plan's verdict on it (`Preflight`: the plan, the
refusals, the warnings, the flags `up` adds), the flags the plan says it still lacks to serve,
and the spec the engine starts with. The job's plan stage, `up`, `fleet up` and a bench's winner
make one (`plan_server`, `server_plan`); `launch`, the re-plan and restart policy
(`launch/recovery.py`), the job's healer and `fleet-repair` take it as it is, and a changed
spec (a re-plan, a bound) is planned again from it without reading the model again
(`ServerPlan.respec`). job.json keeps what it decided (`ServerPlanRecord`), read back typed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from specpilot.check.resolved import ResolvedSpec, resolve
from specpilot.engines.adapter import EngineRelease
from specpilot.launch.preflight import Preflight, launch_spec, run_preflight
from specpilot.models.host_files import read_model
from specpilot.plan.serving import serving_args
from specpilot.plan.types import Plan
from specpilot.spec import Spec


@dataclass(frozen=True)
class AddedFlags:
    """Flags `up` adds to the spec's (a check finding whose fix it applies), and why."""

    args: tuple[str, ...]
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"args": list(self.args), "why": self.why}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AddedFlags:
        return cls(tuple(data["args"]), data["why"])


@dataclass(frozen=True)
class ServerPlanRecord:
    """What a `ServerPlan` decided, as job.json keeps it (secret values masked on save)."""

    name: str
    engine: str
    engine_version: str
    #: the spec file it was read from (a bench's winner: best.toml); None for a pasted command
    source: str | None
    #: the flags and variables the engine starts with: `[engine] args` and what `up` adds
    args: tuple[str, ...]
    env: Mapping[str, str]
    added: tuple[AddedFlags, ...]
    #: check's or plan's refusals (a start needs --force), and their warnings
    refused: tuple[str, ...]
    warnings: tuple[str, ...]
    plan: Plan | None
    #: what the plan says the spec still lacks to serve without running out of memory
    serving_args: tuple[str, ...]
    #: the context the server runs with; None where neither its flags nor the model say it
    context_tokens: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "engine": self.engine,
            "engine_version": self.engine_version,
            "source": self.source,
            "args": list(self.args),
            "env": dict(self.env),
            "added": [a.to_json() for a in self.added],
            "refused": list(self.refused),
            "warnings": list(self.warnings),
            "plan": self.plan.to_json() if self.plan is not None else None,
            "serving_args": list(self.serving_args),
            "context_tokens": self.context_tokens,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ServerPlanRecord:
        """The record `to_json` wrote; KeyError, TypeError or ValueError where it is not one."""
        plan = data["plan"]
        return cls(
            name=str(data["name"]),
            engine=str(data["engine"]),
            engine_version=str(data["engine_version"]),
            source=None if data["source"] is None else str(data["source"]),
            args=tuple(str(a) for a in data["args"]),
            env={str(k): str(v) for k, v in data["env"].items()},
            added=tuple(AddedFlags.from_json(a) for a in data["added"]),
            refused=tuple(str(r) for r in data["refused"]),
            warnings=tuple(str(w) for w in data["warnings"]),
            plan=Plan.from_json(plan) if plan is not None else None,
            serving_args=tuple(str(a) for a in data["serving_args"]),
            context_tokens=None if data["context_tokens"] is None else int(data["context_tokens"]),
        )


@dataclass(frozen=True)
class ServerPlan:
    """One server, decided once per command: see the module's words."""

    resolved: ResolvedSpec
    #: check's and plan's verdict on the resolved spec
    preflight: Preflight
    #: the spec the engine starts with: as given, with the flags `up` adds
    started: Spec
    #: the flags the plan says the spec still lacks to serve (recorded, not added)
    serving_args: tuple[str, ...]

    @property
    def spec(self) -> Spec:
        """The spec as given (a re-plan or a bound changes this one)."""
        return self.resolved.spec

    @property
    def release(self) -> EngineRelease:
        return self.resolved.release

    @property
    def plan(self) -> Plan | None:
        return self.preflight.plan

    def respec(self, spec: Spec) -> ServerPlan:
        """`spec`, a changed copy of this one, checked and planned again: the model is not read
        again and the release not looked up again (`ResolvedSpec.respec`)."""
        return self if spec == self.spec else server_plan(self.resolved.respec(spec))

    def for_member(self, spec: Spec) -> ServerPlan:
        """The same launch as a fleet member's own run (its name, host and port): one
        resolution and one plan per kind of GPU, the model read on the first member's host."""
        return replace(
            self, resolved=replace(self.resolved, spec=spec), started=launch_spec(spec, self.preflight)
        )

    def record(self) -> ServerPlanRecord:
        pre, started = self.preflight, self.started
        return ServerPlanRecord(
            name=started.name,
            engine=started.engine.name,
            engine_version=started.engine.version,
            source=str(started.source_path) if started.source_path is not None else None,
            args=tuple(started.engine.args),
            env=dict(started.engine.env),
            added=tuple(AddedFlags(tuple(args), why) for args, why in pre.added),
            refused=tuple(pre.errors),
            warnings=tuple(pre.warnings),
            plan=self.plan,
            serving_args=self.serving_args,
            context_tokens=self.resolved.context_tokens(),
        )

    def to_json(self) -> dict[str, Any]:
        return self.record().to_json()


def server_plan(resolved: ResolvedSpec) -> ServerPlan:
    """Check and plan one resolution of a spec (`run_preflight`) into the server it starts."""
    pre = run_preflight(resolved)
    plan = pre.plan
    serving = tuple(serving_args(resolved, plan)) if plan is not None and plan.fits else ()
    return ServerPlan(resolved, pre, launch_spec(resolved.spec, pre), serving)


async def plan_server(spec: Spec) -> ServerPlan:
    """`server_plan` of `spec`, its model read once in the command's event loop (on an SSH host
    that is a connection of this loop) and its release looked up once."""
    return server_plan(resolve(spec, await read_model(spec)))
