"""/metrics follows Prometheus naming, and the example Grafana dashboard asks only for what it exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from specpilot.generate.dispatch.servers import ServerPool
from specpilot.generate.dispatch.stats import LiveStats
from specpilot.status.ledger_view import read_snapshot
from specpilot.status.live import LiveRecorder
from specpilot.status.metrics import exposition

ROOT = Path(__file__).resolve().parents[2]


class _Job:
    def __init__(self) -> None:
        self.stats = LiveStats()
        self.pool = ServerPool(["http://user:hunter2@127.0.0.1:1", "http://127.0.0.1:2"], 4)

    def accept_length(self) -> float | None:
        return 2.5


def _exported(directory: Path) -> str:
    job = _Job()
    job.stats.answered("127.0.0.1:1", 0.3, 10, 20)  # as the dispatcher names it: Server.name
    job.stats.answered("127.0.0.1:2", 42.0, 10, 20)
    job.stats.retried('HTTP 429: {"error": "slow down"}')
    job.stats.requeued_from_down_server()
    recorder = LiveRecorder(job)
    recorder.sample()
    return exposition(read_snapshot(directory), recorder.view()).decode()


def test_names_units_and_types(finished_job: Path) -> None:
    text = _exported(finished_job)
    families = list(text_string_to_metric_families(text))
    assert families and all(f.name.startswith("specpilot_") for f in families)
    for family in families:
        if family.type == "counter":
            assert all(s.name.endswith("_total") for s in family.samples), family.name
        else:
            assert not family.name.endswith("_total"), family.name
    latency = next(f for f in families if f.type == "histogram")
    assert latency.name == "specpilot_request_duration_seconds"
    buckets = {
        (s.labels["server"], s.labels["le"]): s.value for s in latency.samples if s.name.endswith("_bucket")
    }
    assert buckets[("127.0.0.1:1", "0.5")] == 1 and buckets[("127.0.0.1:2", "30")] == 0
    assert buckets[("127.0.0.1:2", "60")] == 1 and buckets[("127.0.0.1:2", "+Inf")] == 1
    retries = {
        s.labels["cause"]: s.value for f in families if f.name == "specpilot_retries" for s in f.samples
    }
    assert retries == {"http_429": 1, "server_down": 1}
    assert "hunter2" not in text  # credentials in a server URL are not exported


def test_the_grafana_example_uses_only_exported_series(finished_job: Path) -> None:
    families = list(text_string_to_metric_families(_exported(finished_job)))
    names = {f.name for f in families} | {s.name for f in families for s in f.samples}
    dashboard = json.loads((ROOT / "docs/grafana-specpilot-dashboard.json").read_text())
    asked = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"specpilot_[a-z_]+", target["expr"])
    }
    assert asked and asked <= names, asked - names
    assert len(dashboard["panels"]) >= 10
