"""The guard against the shipped scenarios, scored as `gpuguard demo --json` reports it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuguard.cli.main import app
from gpuguard.demo import score
from gpuguard.model import settings
from tests import demo_runs

FALSE_POSITIVE_CASES = [
    "user-xid-storm",
    "driver-upgrade-dip",
    "mig-reconfig",
    "small-compute-workload",
    "phantom-14-of-32",
    "os-auto-update",
    "dns-public-upstream",
]


def report(name: str) -> dict[str, Any]:
    run = demo_runs.play(name)
    return score.scenario_report(run)


@pytest.mark.parametrize("name", ["xid79-twice", "user-xid13-then-xid79"])
def test_xid79_isolated_within_a_minute_with_default_settings(name: str) -> None:
    r = report(name)
    assert r["missed"] == []
    assert r["false_isolations"] == []
    (seconds,) = r["time_to_isolate_s"].values()
    assert 0 < seconds <= 60  # the seed's guard: 12 min 26 s


@pytest.mark.parametrize("name", ["xid79-twice", "user-xid13-then-xid79"])
def test_xid79_is_isolated_within_a_step_and_a_poll_through_the_agents_condition(
    name: str,
) -> None:
    """The fast path (docs/design.md#fast-path): the agent's GpuGoneFromBus condition wakes the
    guard at the world's next 15 s step plus the agent's 1 s poll, before any scrape."""
    r = report(name)
    (seconds,) = r["time_to_isolate_s"].values()
    assert 0 < seconds <= 16
    first = next(e for e in r["timeline"] if e["kind"] == "isolate")
    assert "(node-condition)" in first["detail"]


def test_the_same_card_falling_again_is_isolated_again() -> None:
    isolations = [e for e in report("xid79-twice")["timeline"] if e["kind"] == "isolate"]
    assert [(e["node"], e["reason"]) for e in isolations] == [("gpu-node-b", "fast-path")] * 2


NODE_ONLY = settings.GuardSettings.model_validate({"gpu_isolation": {"enabled": False}})


@pytest.fixture(scope="module")
def ecc_gpu_level() -> dict[str, Any]:
    return report("ecc-dbe-five")


def test_ecc_dbe_isolates_the_card_after_the_hold_window_and_never_the_node(
    ecc_gpu_level: dict[str, Any],
) -> None:
    r = ecc_gpu_level
    assert r["isolated"] == []
    assert [(g["node"], g["gpu"]) for g in r["gpu_isolated"]] == [("gpu-node-a", "1")]
    assert 600 <= r["time_to_isolate_gpu_s"]["gpu-node-a/1"] <= 660
    assert r["missed"] == []
    # the later double-bit errors hit no job: the RayJob asking for 2 GPUs lands beside it, on
    # the NUMA-local pair the device plugin prefers (GPU 1 is not advertised)
    placed = [e["detail"] for e in r["timeline"] if e["kind"] == "workload"]
    assert "raytrain-worker Running on GPU [2, 3] (training)" in placed
    assert not [e for e in r["timeline"] if e["kind"] == "workload_end"]


def test_ecc_dbe_keeps_ten_times_fewer_healthy_gpus_out_than_a_node_cordon(
    ecc_gpu_level: dict[str, Any],
) -> None:
    gpu_level = ecc_gpu_level
    node_level = score.scenario_report(
        demo_runs.play("ecc-dbe-five", NODE_ONLY)
    )
    assert node_level["isolated"] == ["gpu-node-a"]  # the node path: cordoned at the 1st DBE
    assert node_level["healthy_gpu_hours_out"] > 1000
    assert gpu_level["healthy_gpu_hours_out"] <= 0.1 * node_level["gpu_hours_out"]


@pytest.mark.parametrize("name", FALSE_POSITIVE_CASES)
def test_false_positive_scenarios_isolate_nothing(name: str) -> None:
    r = report(name)
    assert r["isolated"] == []
    assert r["gpu_hours_out"] == 0


@pytest.mark.usefixtures("demo_played_once")
def test_demo_json_has_the_documented_shape() -> None:
    result = CliRunner().invoke(app, ["demo", "--scenario", "xid79-twice", "--json"])
    assert result.exit_code == 0, result.output
    (s,) = json.loads(result.output)["scenarios"]
    assert {"name", "nodes", "isolated", "time_to_isolate_s", "false_isolations", "missed",
            "gpu_hours_out", "timeline"} <= set(s)
    assert s["nodes"] == ["gpu-node-a", "gpu-node-b"]
    assert s["gpu_hours_out"] > 0
    assert all({"t", "kind", "node", "reason"} <= set(e) for e in s["timeline"])


@pytest.mark.usefixtures("demo_played_once")
def test_demo_prints_each_scenarios_figures_in_words() -> None:
    result = CliRunner().invoke(app, ["demo", "--scenario", "xid79-twice"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "gpu-node-b isolated 2s after the fault" in text  # 1 s before a step, +1 s poll
    assert "returned 11m after the repair" in text
    assert "still isolated" in text
