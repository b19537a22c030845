"""Blackwell nodes with NVLink5 Xids, the guard against the shipped scenarios: lines NVIDIA's
decode says to ignore isolate nothing (judged per code they isolated the node), a reset-class
line isolates the node after the hold window (docs/xid-events.md)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuguard.catalog import xid as catalog_xid
from gpuguard.demo import harness, score
from gpuguard.model import settings
from gpuguard.sim import scenario
from tests import demo_runs


def report(name: str) -> dict[str, Any]:
    return score.scenario_report(demo_runs.play(name))


def test_benign_nvlink5_lines_isolate_no_node() -> None:
    r = report("gb200-nvlink5-benign")
    assert (r["isolated"], r["false_isolations"], r["gpu_isolated"]) == ([], [], [])
    marked = [e for e in r["timeline"] if e["kind"] == "xid" and "unhealthy" in e["detail"]]
    assert len(marked) == 3  # the device plugin still drops the GPUs: the loss is real


def test_judged_per_code_the_same_lines_isolated_the_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """The false isolation the per-event rules avoid (played apart: the shared run stays ours)."""
    monkeypatch.setattr(catalog_xid.XidCatalog, "is_hardware_event",
                        lambda self, code, rule="": self.is_hardware(code))
    spec = scenario.load_shipped("gb200-nvlink5-benign")
    r = score.scenario_report(harness.play(spec, settings.GuardSettings()))
    assert r["false_isolations"] == ["gb200-node-1"]


def test_a_reset_class_nvlink5_line_isolates_the_node_after_the_hold_window() -> None:
    r = report("gb200-nvlink5-reset")
    assert (r["isolated"], r["false_isolations"], r["missed"]) == (["gb200-node-1"], [], [])
    assert 600 <= r["time_to_isolate_s"]["gb200-node-1"] <= 660
    (isolation,) = [e for e in r["timeline"] if e["kind"] == "isolate"]
    assert "xid-149" in isolation["detail"]
    assert "node-scoped-xid" in isolation["detail"]
