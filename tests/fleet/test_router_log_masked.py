"""`specpilot logs FLEET` shows the router's log as `logs RUN` shows an engine's: a credential
the router logged (its argv, a worker URL with a password) is masked."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from specpilot.cli import cli
from specpilot.fleet.state import write_fleet
from tests.launch.conftest import run_home  # noqa: F401  (a fixture used here)


def test_the_router_log_shown_masks_what_names_a_credential(
    run_home: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    log = tmp_path / "fl.router.log"
    log.write_text(
        "starting smg --port 30100 --api-key sk-router-0123456789\n"
        "worker added: http://trainer:hunter2-pass@10.0.0.5:30000\n"
        "router ready on 0.0.0.0:30100\n"
    )
    url = "http://127.0.0.1:1"
    write_fleet(
        {
            "name": "fl",
            "router_url": url,
            "router_target": "local",
            "routers": [{"url": url, "pid": None, "log": str(log), "argv": []}],
            "members": [],
        }
    )
    shown = CliRunner().invoke(cli, ["logs", "fl"], catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    assert "router ready on 0.0.0.0:30100" in shown.stdout  # the rest of the log as it is
    assert "sk-router-0123456789" not in shown.stdout and "hunter2-pass" not in shown.stdout
