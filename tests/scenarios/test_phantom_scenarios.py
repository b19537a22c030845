"""The phantom incident (docs/design.md#incidents) end to end in the simulator: the 14 phantom GPUs
of 32, the small compute-bound job that only looks phantom, and a phantom GPU cleared by a new
workload."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from typer.testing import CliRunner

from gpuguard.cli.main import app
from gpuguard.demo import findings, harness, score
from gpuguard.model import decisions
from gpuguard.model import settings as settings_model
from gpuguard.policy import utilization
from gpuguard.sim import clock, prometheus_view, scenario, store, world
from gpuguard.sources import gpu_metrics
from tests import demo_runs

SETTINGS = settings_model.GuardSettings()
# The phantom incident's table: gpu-node-1: 1,3,4,5,7; gpu-node-2: 5,6; gpu-node-3: 3,5,6,7;
# gpu-node-4: 1,2,4.
SEED_PHANTOMS = {
    ("gpu-node-1", "1"), ("gpu-node-1", "3"), ("gpu-node-1", "4"), ("gpu-node-1", "5"),
    ("gpu-node-1", "7"), ("gpu-node-2", "5"), ("gpu-node-2", "6"), ("gpu-node-3", "3"),
    ("gpu-node-3", "5"), ("gpu-node-3", "6"), ("gpu-node-3", "7"), ("gpu-node-4", "1"),
    ("gpu-node-4", "2"), ("gpu-node-4", "4"),
}  # fmt: skip

CLEARED_BY_WORKLOAD = """
name: phantom-then-new-workload
start: "2026-04-21T01:00:00Z"
duration: 20m
fleet: {nodes: [gpu-node-1], gpus_per_node: 2}
events:
  - {at: 0s, phantom: {node: gpu-node-1, gpu: 1}}
  - {at: 30m, workload: {node: gpu-node-1, gpus: [1], duration: 1h, name: run5}}
"""


class Played:
    """A scenario's world and its Prometheus view, scraped whenever the world changes."""

    def __init__(self, spec: scenario.Scenario) -> None:
        sim_clock = clock.SimClock(spec.start)
        objects = store.ObjectStore(now=sim_clock.now)
        self.world = world.World.from_scenario(spec, objects, sim_clock)
        isolation = SETTINGS.isolation
        self.view = prometheus_view.WorldPrometheus(
            self.world, isolation.hold_window, isolation.xid_lookback
        )
        self._seen: tuple[int, int] | None = None
        self.view.scrape()

    def run_until(self, offset: timedelta) -> None:
        self.world.run(step=harness.STEP, until=offset, on_step=self._scrape_on_change)

    def _scrape_on_change(self, w: world.World) -> None:
        current = (w.store.resource_version, len(w.timeline))
        if current != self._seen:
            self.view.scrape()
            self._seen = current

    def phantoms(self) -> set[tuple[str, str]]:
        found = findings.phantom_findings(self.view, SETTINGS.phantom, self.world.now)
        return {(f["node"], f["gpu"]) for f in found}


def test_phantom_14_of_32_finds_exactly_the_seeds_gpus_and_their_waste() -> None:
    report = score.scenario_report(
        demo_runs.play("phantom-14-of-32", SETTINGS)
    )
    found = report["findings"]
    assert {(f["node"], f["gpu"]) for f in found} == SEED_PHANTOMS
    assert report["isolated"] == []
    # The seed: ~1,650 W drawn by the 14 phantom GPUs, ~114 W each against ~15 W idle.
    assert 1500 <= sum(f["power_w"] for f in found) <= 1800
    assert 1300 <= sum(f["wasted_w"] for f in found) <= 1650
    assert all(f["kind"] == "phantom" and f["reason"] == "phantom-utilization" for f in found)
    # Run 1's GPUs went phantom at 40 m of a 4 h scenario: 3 h 20 min so far.
    assert max(f["gpu_hours"] for f in found) == 3.33


@pytest.mark.usefixtures("demo_played_once")
def test_demo_json_lists_phantom_findings() -> None:
    result = CliRunner().invoke(app, ["demo", "--scenario", "phantom-14-of-32", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    (s,) = payload["scenarios"]
    assert len(s["findings"]) == 14
    assert {"kind", "node", "gpu", "wasted_w"} <= set(s["findings"][0])
    assert payload["totals"]["phantom_gpus"] == 14


def test_small_compute_workload_is_busy_not_phantom() -> None:
    """FB ~50 MiB, SM ~100 %, P0 — the naive rule fires; the pod join says no."""
    played = Played(scenario.load_shipped("small-compute-workload"))
    played.run_until(timedelta(minutes=31))
    assert played.phantoms() == set()
    window = timedelta(minutes=15)
    samples = played.view.gpu_window_samples(
        played.world.now, window, signature_lookback=timedelta(hours=1),
        util_min_pct=95, fb_used_max_mib=100,
    )  # fmt: skip
    windows = gpu_metrics.windows_from_samples(samples)
    diagnosed = utilization.diagnose(windows, SETTINGS.utilization, window)
    by_gpu = {(d.node, d.gpu): d.reason for d in diagnosed}
    assert by_gpu[("gpu-node-1", "3")] is decisions.Reason.LOW_OCCUPANCY


def test_a_phantom_gpu_that_receives_a_new_workload_clears() -> None:
    played = Played(scenario.loads(CLEARED_BY_WORKLOAD))
    played.run_until(timedelta(minutes=10))
    assert played.phantoms() == set()  # not held for 15 min yet
    played.run_until(timedelta(minutes=25))
    assert played.phantoms() == {("gpu-node-1", "1")}
    played.run_until(timedelta(minutes=50))
    assert played.phantoms() == set()
