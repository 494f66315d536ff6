"""Job fixtures: a job file over a stand-in SGLang server spec and a prompts file."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.launch.conftest import SpecFactory, make_spec, run_home, toml_value  # noqa: F401  (fixtures used here)

JobFactory = Callable[..., Path]


@pytest.fixture
def make_job(make_spec: SpecFactory, run_home: Path, tmp_path: Path) -> JobFactory:  # noqa: F811
    """A job file (in tmp_path/jobdir) over a stand-in spec; returns its path."""

    def make(
        *,
        scenario: str = "sglang_ready",
        rows: int = 20,
        standin: dict[str, Any] | None = None,
        args: list[str] | None = None,
        env: dict[str, str] | None = None,
        job: dict[str, object] | None = None,
        sampling: dict[str, object] | None = None,
        extra: str = "",
        gpu_memory_gib: float = 95.6,
    ) -> Path:
        spec = make_spec(
            scenario,
            name="jobsrv",
            standin={"answers": "echo", "faults": {"latency_s": 0.01}, **(standin or {})},
            args=args,
            env=env,
            gpu_memory_gib=gpu_memory_gib,
        )
        assert spec.source_path is not None
        folder = tmp_path / "jobdir"
        folder.mkdir(exist_ok=True)
        prompts = folder / "prompts.jsonl"
        prompts.write_text(
            "".join(json.dumps({"id": f"q{i}", "prompt": f"question {i}"}) + "\n" for i in range(rows))
        )
        table = {
            "server": str(spec.source_path),
            "prompts": "prompts.jsonl",
            "output": "out",
            "export": ["specforge"],
            **(job or {}),
        }
        lines = ["[job]", *(f"{k} = {toml_value(v)}" for k, v in table.items())]
        lines += [
            "[job.sampling]",
            *(f"{k} = {toml_value(v)}" for k, v in (sampling or {"max_tokens": 16}).items()),
        ]
        path = folder / "job.toml"
        path.write_text("\n".join(lines) + "\n" + extra)
        return path

    return make


def output_ids(out: Path) -> list[str]:
    """Every row id the job wrote (clean and flagged), repeats included."""
    ids = []
    for part in [
        *sorted((out / "data").glob("part-*.jsonl")),
        *sorted((out / "flagged").glob("part-*.jsonl")),
    ]:
        ids += [json.loads(line)["id"] for line in part.read_text().splitlines()]
    return ids
