"""The README's bench example runs as printed: its inputs come from a script in the repository."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from specpilot.check import check_spec
from specpilot.spec import load_spec
from tests.bench.conftest import specpilot
from tests.fixtures.engines import free_port

ROOT = Path(__file__).resolve().parents[2]
WRITER = ROOT / "tests" / "fakeengines" / "bench_standin.py"


def test_the_readme_names_the_writer_and_the_files_it_writes() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "python tests/fakeengines/bench_standin.py\nwrote standin.toml and prompts.jsonl" in readme
    assert "specpilot bench standin.toml --prompts prompts.jsonl --job out/" in readme


def test_the_written_standin_spec_benches_from_any_folder(tmp_path: Path, run_home: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(WRITER)], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "wrote standin.toml and prompts.jsonl (300 prompts)"
    written = tmp_path / "standin.toml"
    # another test (or engineer) on this machine may hold the README's port
    written.write_text(written.read_text().replace("port = 30123", f"port = {free_port()}"))
    spec = load_spec(written)
    assert check_spec(spec).ok
    assert len((tmp_path / "prompts.jsonl").read_text().splitlines()) == 300
    ran = specpilot(
        "bench", tmp_path / "standin.toml", "--prompts", tmp_path / "prompts.jsonl", "--job", tmp_path / "out",
        "--variants", "plain", "--sample", 8, "--max-tokens", 8, "--budget-s", 60, "--warmup-s", 1,
    )  # fmt: skip
    assert ran.code == 0, ran.output
    assert (tmp_path / "out" / "bench.json").exists()
