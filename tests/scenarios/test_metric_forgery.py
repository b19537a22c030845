"""Metric forgery end to end (docs/security.md#metric-forgery): a tenant's pods export Xid series
for other nodes' GPUs, dcgm-exporter's gauge and gpuguard's own counter. Read only for their
scrape target's node, they isolate nothing and withhold nothing, and a finding names each
forger; read by the node they name, the same dips trip the breaker."""

from __future__ import annotations

from typing import Any

import pytest

from gpuguard.demo import harness, score
from gpuguard.model import series, settings
from gpuguard.sim import scenario

CLAIMED = ["gpu-node-000", "gpu-node-001", "gpu-node-002", "gpu-node-003", "gpu-node-004",
           "gpu-node-005"]  # fmt: skip


def play() -> dict[str, Any]:
    run = harness.play(scenario.load_shipped("metric-forgery"), settings.GuardSettings())
    return score.scenario_report(run)


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    return play()


def test_forged_series_isolate_nothing_and_withhold_nothing(report: dict[str, Any]) -> None:
    assert report["isolated"] == ["gpu-node-008"]  # the real fault, at once
    assert report["time_to_isolate_s"]["gpu-node-008"] <= 60
    assert report["false_isolations"] == []
    assert report["withheld"] == []
    assert report["breaker"]["trips"] == []
    assert not [line for line in report["ledger"] if line["node"] in CLAIMED]


def test_a_finding_names_each_forger(report: dict[str, Any]) -> None:
    forged = [e for e in report["timeline"]
              if e["kind"] == "guard_finding" and e["reason"] == "forged-series"]  # fmt: skip
    assert {e["node"] for e in forged} == {"gpu-node-010", "gpu-node-011"}
    by_node = {e["node"]: e["detail"] for e in forged}
    assert "namespace=tenant-a pod=exporter-0" in by_node["gpu-node-011"]
    assert "DCGM_FI_DEV_XID_ERRORS for node gpu-node-00" in by_node["gpu-node-011"]
    assert "namespace=tenant-a pod=exporter-1" in by_node["gpu-node-010"]
    assert "gpuguard_xid_total for node gpu-node-00" in by_node["gpu-node-010"]


def test_read_as_labelled_the_same_dips_trip_the_breaker(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check is what holds: without it the forged series are read for the forgers' own
    nodes (their target ``node``), whose dips join the real fault as candidates at once."""
    monkeypatch.setattr(series, "claimed_node", lambda labels: None)
    unchecked = play()
    assert unchecked["breaker"]["trips"] == [{"at": 1801.0, "candidates": 3}]
