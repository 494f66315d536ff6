"""`fleet-repair` of a member whose model is read on its SSH host (the ordinary GPU-host case).

The repair plans the member again before restarting it; that reads the model's config.json
over SSH inside the repair's own event loop (a second `asyncio.run` there was the bug)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from specpilot.cli import cli
from tests.fixtures.sshd import SshdServer
from tests.fleet.conftest import FleetFactory

pytestmark = pytest.mark.sshd


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_repair_restarts_a_member_whose_model_is_on_its_ssh_host(
    smg: str, make_fleet: FleetFactory, run_home: Path, sshd: SshdServer, tmp_path: Path
) -> None:
    spec_host = {"target": "local", "identity_file": sshd.identity_file, "known_hosts": sshd.known_hosts}
    path = make_fleet([sshd.target], name="sshrep", spec_host=spec_host)
    member = tmp_path / "member.toml"
    # an absolute path is the model as the host sees it: read over SSH, not beside the spec
    member.write_text(member.read_text().replace('path = "model"', f'path = "{tmp_path / "model"}"'))
    try:
        up = run("up", str(path), "--json")
        assert up.exit_code == 0, up.output
        state = json.loads((run_home.parent / "state" / "runs" / "sshrep-0" / "state.json").read_text())
        os.killpg(int(state["pgid"]), signal.SIGKILL)

        repaired = run("fleet-repair", "sshrep", "--backoff-s", "0", "--json")
        assert repaired.exit_code == 0, repaired.output
        members = json.loads(repaired.stdout)["members"]
        assert [(m["name"], m["action"]) for m in members] == [("sshrep-0", "restarted")]
        after = json.loads((run_home.parent / "state" / "runs" / "sshrep-0" / "state.json").read_text())
        assert after["phase"] == "ready" and after["pid"] != state["pid"]
    finally:
        run("down", "sshrep")
        shutil.rmtree(
            Path(pwd.getpwuid(os.getuid()).pw_dir) / ".specpilot" / "runs" / "sshrep-0", ignore_errors=True
        )
