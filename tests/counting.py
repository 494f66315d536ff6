"""Count what one command resolves: the model reads and the flag rules' evaluations."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from specpilot.check import engine as check_engine
from specpilot.models import host_files


class Counted:
    """The model reads and the rule evaluations (by the launch's argv) of one command."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads = 0
        self.evaluations: Counter[tuple[str, ...]] = Counter()
        read, parse = host_files.spec_model_files, check_engine.parse_argv

        def counted_read(*args: Any) -> Any:
            self.reads += 1
            return read(*args)

        def counted_parse(release: Any, argv: list[str]) -> Any:
            self.evaluations[tuple(argv)] += 1
            return parse(release, argv)

        monkeypatch.setattr(host_files, "spec_model_files", counted_read)
        monkeypatch.setattr(check_engine, "parse_argv", counted_parse)
