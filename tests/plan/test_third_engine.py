"""A third engine plugs in with one adapter and one planner, touching no other module:
`check`, `plan`, `plan --from-log` and the log classifier run on a spec naming it."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from specpilot.check.effective import EffectiveArgs
from specpilot.cli import cli
from specpilot.engines import registry
from specpilot.engines.adapter import Engine, EngineLog, LaunchCommand, ReleaseWindow
from specpilot.engines.draft import DraftKnobs
from specpilot.engines.flags import FlagInfo, ReleaseTable
from specpilot.engines.logfacts import LogFacts
from specpilot.engines.loglines import LogQuantity, Unit, read_log
from specpilot.engines.registry import engine_by_name
from specpilot.engines.rules import Rule
from specpilot.engines.signatures import Kind, Signature
from specpilot.launch.classify import LogClassifier
from specpilot.models.shape import ModelShape
from specpilot.plan import planners
from specpilot.plan.types import Plan, VllmDetails
from specpilot.spec import Spec

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "examples" / "models" / "qwen3-8b"


def _flag(name: str, kind: str, default: object) -> FlagInfo:
    dest = name.removeprefix("--").replace("-", "_")
    return FlagInfo(name, dest, kind, default, (), None, False, None)


TABLE = ReleaseTable(
    engine="stub",
    version=Version("1.0"),
    flags=(
        _flag("--model", "str", None),
        _flag("--host", "str", "127.0.0.1"),
        _flag("--port", "int", 8000),
        _flag("--max-seqs", "int", 64),
    ),
    env=frozenset({"STUB_LOG_LEVEL"}),
    flexible_parser=False,
)
RULES = (
    Rule(
        "stub-seqs-too-many",
        "stub",
        SpecifierSet(">=1.0"),
        "error",
        lambda ctx: int(ctx.values["max_seqs"]) > 512,  # type: ignore[call-overload]
        "{max_seqs} sequences are more than stub serves",
    ),
    Rule(
        "stub-seqs-rounded",
        "stub",
        SpecifierSet(">=1.0"),
        "adjusts",
        lambda ctx: int(ctx.values["max_seqs"]) % 8 != 0,  # type: ignore[call-overload]
        "stub rounds max_seqs up to a multiple of 8",
        sets=lambda ctx: {"max_seqs": -(-int(ctx.values["max_seqs"]) // 8) * 8},  # type: ignore[call-overload]
    ),
)
WEIGHTS = LogQuantity(
    "weights_gib", re.compile(r"stub weights took (?P<value>[0-9.]+) GiB"), Unit.GIB, "stub"
)


def _no_context_len(config: Mapping[str, Any]) -> int | None:
    return None


STUB = Engine(
    name="stub",
    display_name="Stub",
    newest_version="1.0",
    supported_releases=SpecifierSet(">=1.0,<2"),
    release_tables=lambda: (TABLE,),
    release_window=lambda version: ReleaseWindow("Stub 1.x", lambda release: release.major == 1),
    measured=(),
    model_flag="--model",
    default_command=("stub-server",),
    launch=LaunchCommand({}, "stub", False, ("stub serve ...",), "add --model DIR"),
    distributions=("stub",),
    env_prefixes=("STUB_",),
    rules=RULES,
    env_replacements={},
    value_ranges={},
    field_of_dest={},
    context_len=_no_context_len,
    log=EngineLog((WEIGHTS,), (re.compile(r"stub server"),), (WEIGHTS.pattern,), "stub weights took"),
    signatures=(Signature("stub", Kind.FATAL, "stub-oom", r"stub: no memory left", cause="oom"),),
    # no speculative method: bench compares only "plain" for it
    draft=DraftKnobs(
        frozenset(),
        lambda read: None,
        lambda read: 0,
        lambda read, method, k: (),
        False,
        "--max-requests",
        "--memory-share",
    ),
    spec_metrics=(),
)


def _stub_plan(spec: Spec, shape: ModelShape, args: EffectiveArgs, facts: LogFacts | None) -> Plan:
    logged = facts.weights_gib if facts is not None else None
    weights_gib = logged if logged is not None else 10.0
    return Plan(
        engine="stub",
        engine_version=spec.engine.version,
        fits=weights_gib < spec.gpu.memory_gib,
        weights_gib=weights_gib,
        kv_bytes_per_token=0,
        kv_tokens=0,
        state_bytes_per_request=0,
        state_slots=0,
        max_running_requests=int(args.get_int("max_seqs") or 0),
        memory_fraction=0.9,
        reserve_gib=0.0,
        reserve_needed_gib=0.0,
        details=VllmDetails(16, 0, 1, 0, 0, 0.0, 4096),
    )


STUB_PLANNER = planners.Planner(
    "stub",
    _stub_plan,
    lambda text: LogFacts.from_values(read_log(STUB.log.quantities, text)),
    lambda *_: None,
)


@pytest.fixture
def stub_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(registry, "ENGINES", (*registry.ENGINES, STUB))
    monkeypatch.setattr(planners, "PLANNERS", (*planners.PLANNERS, STUB_PLANNER))
    shutil.copytree(MODEL, tmp_path / "model")
    spec = tmp_path / "stub.toml"
    spec.write_text(
        'name = "stub"\n[model]\npath = "model"\n[gpu]\nmemory_gib = 80\n'
        '[engine]\nname = "stub"\nversion = "1.0"\nargs = ["--max-seqs", "100"]\n'
    )
    return spec


def test_check_runs_the_stub_engines_rules(stub_spec: Path) -> None:
    result = CliRunner().invoke(cli, ["check", str(stub_spec), "--json"])
    data = json.loads(result.output)
    assert data["ok"], result.output
    assert "stub-seqs-rounded" in [f["rule"] for f in data["findings"]]
    assert "--max-seqs 104" in " ".join(data["effective_args"])


def test_plan_runs_the_stub_planner_on_checks_values(stub_spec: Path) -> None:
    result = CliRunner().invoke(cli, ["plan", str(stub_spec), "--json"])
    data = json.loads(result.output)
    assert data["engine"] == "stub" and data["max_running_requests"] == 104, result.output
    assert data["provenance"]["arithmetic"] == "Stub 1.x"


def test_a_stub_log_calibrates_and_another_engines_is_refused(stub_spec: Path, tmp_path: Path) -> None:
    log = tmp_path / "stub.log"
    log.write_text("stub server 1.0\nstub weights took 12.5 GiB\n")
    result = CliRunner().invoke(cli, ["plan", str(stub_spec), "--json", "--from-log", str(log)])
    assert json.loads(result.output)["weights_gib"] == 12.5, result.output
    log.write_text("Load weight begin. avail mem=94.93 GB\nLoad weight end. mem usage=51.05 GB.\n")
    result = CliRunner().invoke(cli, ["plan", str(stub_spec), "--from-log", str(log)])
    assert "the log is a SGLang log; the spec's engine is Stub" in result.output


def test_the_stub_engines_signature_classifies_its_failure(stub_spec: Path) -> None:
    classifier = LogClassifier(engine_by_name("stub"))
    for line in ("stub server 1.0", "stub: no memory left"):
        classifier.feed(line)
    assert classifier.failure(exited=True).cause == "oom"


def test_an_unknown_engine_is_refused_with_the_registered_names(stub_spec: Path) -> None:
    stub_spec.write_text(stub_spec.read_text().replace('name = "stub"\nversion', 'name = "other"\nversion'))
    result = CliRunner().invoke(cli, ["check", str(stub_spec)])
    assert "Input should be 'sglang', 'vllm' or 'stub'" in result.output
