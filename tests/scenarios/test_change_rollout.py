"""Declared driver and kernel changes rolled out in canary waves, end to end in the simulator
(docs/change-management.md): one rollout completes without interrupting a GPU job and never
has more than its limit out; the same rollout stops after a canary that boots without ip_vs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuguard.demo import harness, score
from gpuguard.model import annotation_keys as keys
from gpuguard.model import settings
from gpuguard.sim import scenario

OLD, NEW = "580.126.09", "580.159.03"


def report_of(name: str) -> tuple[harness.ScenarioRun, dict[str, Any]]:
    run = harness.play(scenario.load_shipped(name), settings.GuardSettings())
    return run, score.scenario_report(run)


@pytest.fixture(scope="module")
def completes() -> tuple[harness.ScenarioRun, dict[str, Any]]:
    return report_of("driver-kernel-rollout")


@pytest.fixture(scope="module")
def stops() -> tuple[harness.ScenarioRun, dict[str, Any]]:
    return report_of("driver-kernel-rollout-canary-stops")


def test_the_rollout_completes_wave_by_wave_within_its_limits(
    completes: tuple[harness.ScenarioRun, dict[str, Any]],
) -> None:
    run, report = completes
    (rollout,) = report["rollouts"]
    assert rollout["state"] == "completed"
    assert rollout["stopped_by"] is None
    assert [len(w["nodes"]) for w in rollout["waves"]] == [1, 2, 9]
    assert rollout["waves"][0]["nodes"] == ["gpu-node-000"]  # the named canary first
    assert all(w["result"] == "passed" for w in rollout["waves"])
    starts = [w["started_s"] for w in rollout["waves"]]
    ends = [w["finished_s"] for w in rollout["waves"]]
    assert starts[1] >= ends[0]
    assert starts[2] >= ends[1]
    assert rollout["max_out"] == 3  # max_unavailable
    assert all(n.driver_module == NEW and n.kernel_release == "6.8.0-60-generic"
               for n in run.played.nodes)
    assert report["isolated"] == []  # change cordons are not faults
    burnins = {j["metadata"]["labels"][keys.BURNIN_NODE_LABEL]: j
                for j in run.played.store.list("Job")}
    assert sorted(burnins) == sorted(n.name for n in run.played.nodes)  # each one burnt in
    assert all(j["metadata"]["annotations"][keys.CHANGE] == "drv-580-159"
               and j["metadata"]["annotations"][keys.BOOT_ID] == node.boot_id  # the new boot
               and any(c["type"] == "Complete" for c in j["status"]["conditions"])
               for node in run.played.nodes for j in [burnins[node.name]])
    json.dumps(report)


def test_no_gpu_job_is_interrupted_and_busy_nodes_wait_for_their_job(
    completes: tuple[harness.ScenarioRun, dict[str, Any]],
) -> None:
    run, report = completes
    ended = {e["node"]: e for e in report["timeline"] if e["kind"] == "workload_end"}
    assert len(ended) == 5
    assert all(e["detail"].endswith("Succeeded") for e in ended.values())
    cordons = {e["node"]: e["t"] for e in report["timeline"]
               if e["kind"] == "change" and e["reason"] == "cordon-for-change"}
    assert all(cordons[node] >= e["t"] for node, e in ended.items())
    for obj in run.played.store.list("Node"):
        assert not obj["spec"].get("unschedulable")
        assert json.loads(obj["metadata"]["annotations"][keys.CHANGE])["phase"] == "done"


def test_a_canary_without_ip_vs_stops_the_rollout_and_stays_cordoned(
    stops: tuple[harness.ScenarioRun, dict[str, Any]],
) -> None:
    run, report = stops
    (rollout,) = report["rollouts"]
    assert rollout["state"] == "stopped"
    assert rollout["stopped_by"] == {"node": "gpu-node-000", "check": "ipvs-loaded"}
    assert [w["result"] for w in rollout["waves"]] == ["failed", "pending", "pending"]
    assert rollout["max_out"] == 1
    canary = run.played.store.get("Node", "", "gpu-node-000")
    assert canary["spec"]["unschedulable"] is True
    mark = json.loads(canary["metadata"]["annotations"][keys.CHANGE])
    assert mark["phase"] == "failed"
    assert mark["check"] == "ipvs-loaded"
    assert run.played.store.list("Job") == []  # a failed check: no burn-in
    others = [n for n in run.played.nodes if n.name != "gpu-node-000"]
    assert all(n.driver_module == OLD and n.driver_library == OLD for n in others)
    assert not any(o["spec"].get("unschedulable") for o in run.played.store.list("Node")
                   if o["metadata"]["name"] != "gpu-node-000")


def test_a_kernel_only_rollout_on_a_default_fleet_completes() -> None:
    """Without its own check list a change requires the checks that passed on each node
    before it: rke2-version, UNKNOWN on a fleet that declares no control-plane version, does
    not hold the canary until the verify timeout stops the rollout."""
    run, report = report_of("kernel-rollout-default-checks")
    (rollout,) = report["rollouts"]
    assert (rollout["state"], rollout["stopped_by"]) == ("completed", None)
    assert [(len(w["nodes"]), w["result"]) for w in rollout["waves"]] == [(1, "passed"),
                                                                       (3, "passed")]
    assert all(n.kernel_release == "6.8.0-60-generic" for n in run.played.nodes)
    marks = [json.loads(o["metadata"]["annotations"][keys.CHANGE])
             for o in run.played.store.list("Node")]
    assert all(m["phase"] == "done" for m in marks)
