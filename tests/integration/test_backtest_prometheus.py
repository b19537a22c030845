"""`gpuguard backtest` over a real Prometheus holding recorded history: the shipped Xid 79
scenario played 2 days ago and remote-written with staleness markers, as a scraping Prometheus
holds it; the replay finds gpu-node-b at the fault, never
gpu-node-a, and counts instants without data instead of guessing."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuguard.cli.main import app
from tests.integration import prometheus, remote_write

pytestmark = pytest.mark.integration


def test_backtest_replays_the_xid79_incident_from_history(tmp_path: Path) -> None:
    origin, recorder = prometheus.recorded_two_days_ago(
        "xid79-twice", step=timedelta(seconds=15), until=timedelta(minutes=30)
    )
    fault = origin + timedelta(minutes=3, seconds=59)
    with remote_write.served(recorder, tmp_path) as prom:  # with staleness markers
        result = CliRunner().invoke(
            app,
            [
                "backtest",
                "--prometheus-url",
                prom.url,
                "--from",
                (origin - timedelta(minutes=10)).isoformat(),
                "--to",
                (origin + timedelta(minutes=30)).isoformat(),
                "--step",
                "1m",
                "-o",
                "json",
            ],
        )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    (would,) = report["would_isolate"]
    assert (would["node"], would["fault"], would["reason"]) == ("gpu-node-b", "xid-79", "fast-path")
    at = datetime.fromisoformat(would["at"])
    assert timedelta(0) < at - fault <= timedelta(minutes=1, seconds=30)
    assert report["undecided"] >= 10  # the ten minutes before any data was recorded
    assert report["instants"] == 41
