"""What a user sees first: no third-party warning before the answer, no secret in a fix."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from specpilot.cli import cli

ROOT = Path(__file__).resolve().parents[2]


def test_a_command_that_loads_asyncssh_prints_no_warning(tmp_path: Path) -> None:
    """cryptography 51 deprecates DSA, which asyncssh names at import: ten lines of warnings
    before `status`'s answer. A fresh interpreter: the import happens once per process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "SPECPILOT_HOME": str(tmp_path)}
    env.pop("PYTHONWARNINGS", None)
    done = subprocess.run(
        [sys.executable, "-m", "specpilot", "status", "no-such-run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: NAME: no run named 'no-such-run'"), done.stderr
    assert "Warning" not in done.stderr


def test_no_warning_filter_outlives_the_import() -> None:
    """The filter is for asyncssh's import only: no warnings filter of it is left in place."""
    import warnings

    from cryptography.utils import CryptographyDeprecationWarning

    import specpilot.hosts.ssh  # noqa: F401

    left = [f for f in warnings.filters if f[0] == "ignore" and f[2] is CryptographyDeprecationWarning]
    assert left == []


def test_a_mistyped_secret_flag_keeps_its_value_out_of_the_fix() -> None:
    """`--api-kye sk-...`: the fix renames it to --api-key, and printed the key doing so."""
    secret = "sk-live-0123456789abcdef"
    argv = ["check", "--engine-version", "0.33.0", "--no-model", "--"]
    argv += ["vllm", "serve", "/nonexistent", "--api-kye", secret]
    for extra in ([], ["--json"], ["--fix"]):
        result = CliRunner().invoke(cli, [*argv[:4], *extra, *argv[4:]])
        assert "--api-kye" in result.output
        assert secret not in result.output, extra
