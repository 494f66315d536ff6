"""Plan a release with another post-pool fit on its row, as `gpu/sglang/fit.py` does."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specpilot.engines.sglang import releases
from specpilot.engines.sglang.postpool import PostPoolFit


def set_fit(monkeypatch: pytest.MonkeyPatch, fit: PostPoolFit | None, version: str = "0.5.17") -> None:
    """The row of `version` with `fit` as its `post_pool_fit` (None: every term estimated)."""
    rows = tuple(replace(r, post_pool_fit=fit) if r.covers(version) else r for r in releases.RELEASES)
    monkeypatch.setattr(releases, "RELEASES", rows)
