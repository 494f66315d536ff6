"""Fixtures for the generate tests: a fault-injecting fake server and input writers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.generate.fake_server import FakeServer, Faults


@pytest.fixture
def fake_server() -> Iterator[FakeServer]:
    server = FakeServer(Faults()).start()
    yield server
    server.close()


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def prompt_rows(count: int, *, prefix: str = "q") -> list[dict[str, Any]]:
    return [
        {"id": f"{prefix}{i}", "conversations": [{"role": "user", "content": f"{prefix} {i}"}]}
        for i in range(count)
    ]


def read_output(directory: Path) -> list[dict[str, Any]]:
    rows = []
    for part in sorted((directory / "data").glob("part-*.jsonl")):
        rows += [json.loads(line) for line in part.read_text().splitlines()]
    return rows
