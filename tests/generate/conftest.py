"""Fixtures for the generate tests: the fault-injecting stand-in server and input writers."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakeengines.standin import Faults, Handler, StandIn


@pytest.fixture
def fake_server() -> Iterator[StandIn]:
    server = StandIn(Faults()).start()
    yield server
    server.close()


@contextlib.contextmanager
def scripted_server(chat: Handler) -> Iterator[int]:
    """The stand-in answering /v1/chat/completions with `chat`; yields its port."""
    with StandIn(routes={"/v1/chat/completions": chat}) as server:
        yield server.port


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
