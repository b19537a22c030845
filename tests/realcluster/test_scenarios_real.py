"""The real-cluster scenario tier: shipped scenarios played twice with the same settings — on
the simulator's own API (as ``gpuguard demo`` plays them) and on a real control plane
(``demo.real_plane``: the real Job controller, TTL controller, PodGC, scheduler and node
lifecycle controller; gpuguard's own ServiceAccount token under the chart's RBAC and
admission policies) — and held to end the same way, each decision within one tick.

Where a scenario waits on a hung Job, the tier shortens that Job's deadline in both runs (the
scenario's story is the same; the wall clock it costs is not): the real Job controller ends
it on the wall clock, which runs ``SPEED`` times slower than the scenario's while a Job is in
flight (docs/real-control-plane.md#scenario-tier).
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuguard.demo import harness, real_plane
from gpuguard.model import settings as settings_model
from gpuguard.sim import scenario
from gpuguard.sim.control_plane import chart, cluster
from tests import demo_runs

SPEED = 20.0
TICK_S = settings_model.ControllerSettings().interval.total_seconds()

SHORTER_JOBS: dict[str, dict[str, Any]] = {
    # the Job that hangs ends at its deadline: shorter, so the tier spends seconds, not minutes
    "evidence-job-hangs": {"controller": {"evidence_deadline": timedelta(minutes=2)}},
    "burnin-hangs": {"return_to_pool": {"burnin_deadline": timedelta(minutes=5)}},
}
TIER = [
    "xid79-twice",
    "small-fleet-two-faults",
    "metric-storm",
    "evidence-job-hangs",
    "burnin-hangs",
    "ecc-dbe-five",
    "driver-kernel-rollout-canary-stops",
]


def tier_settings(name: str) -> settings_model.GuardSettings:
    return settings_model.GuardSettings.model_validate(SHORTER_JOBS.get(name, {}))


@pytest.mark.parametrize("name", TIER)
def test_a_scenario_on_a_real_control_plane_ends_as_on_the_simulators_api(
    name: str, bin_dir: Path, tmp_path: Path
) -> None:
    spec = scenario.load_shipped(name)
    settings = tier_settings(name)
    simulated = demo_runs.play(spec, settings)  # the run the demo tests share, where they ran
    with cluster.start(tmp_path / "control-plane") as plane:
        chart.install(plane)
        plane.request(  # the NVIDIA runtime's RuntimeClass, as the GPU Operator installs it
            "POST", "/apis/node.k8s.io/v1/runtimeclasses",
            {"metadata": {"name": "nvidia"}, "handler": "nvidia"},
        )  # fmt: skip
        real = harness.play(
            spec,
            real_plane.wall_clock_settings(settings, SPEED),
            api=real_plane.api(plane, SPEED),
        )
    assert outcome(real) == outcome(simulated)
    assert_within_a_tick(decisions(real), decisions(simulated))


def outcome(run: harness.ScenarioRun) -> dict[str, Any]:
    """How the scenario ended: who is isolated and why, verdicts, returns, cards, what is
    withheld or GPU-isolated at the end, breaker trips, and every decision's kind."""
    return {
        "isolated": sorted(run.isolated_at),
        "verdicts": run.verdicts,
        "returns": {node: len(times) for node, times in run.returned_at.items()},
        "held": run.held,
        "cards": run.cards,
        "withheld": run.withheld,
        "gpu_isolated": run.gpu_isolated,
        "trips": len(run.trips),
        "decisions": Counter((d["kind"], d["node"], d["reason"]) for d in run.guard_timeline),
    }


Timed = dict[tuple[str, str, str], list[float]]  # (kind, node, reason) -> when, in order


def decisions(run: harness.ScenarioRun) -> Timed:
    timed: Timed = {}
    for d in run.guard_timeline:
        timed.setdefault((d["kind"], d["node"], d["reason"]), []).append(d["t"])
    return timed


def assert_within_a_tick(real: Timed, simulated: Timed) -> None:
    late = {
        key: (a, b)
        for key in simulated
        for a, b in zip(real.get(key, []), simulated[key], strict=False)
        if abs(a - b) > TICK_S
    }
    assert not late, f"decisions more than a tick ({TICK_S:.0f}s) apart (real, simulated): {late}"
