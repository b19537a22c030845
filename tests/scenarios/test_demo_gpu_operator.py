"""The GPU Operator route end to end in the simulator (docs/gpu-isolation.md#gpu-operator): on
a node the operator manages, the guard isolates one card by switching the operator's device
plugin off with its operand label beside the chart's per-node plugin, keeps it out across a
plugin restart and a reboot, and on return removes the label so the operator's plugin comes
back advertising every GPU. One play."""

from __future__ import annotations

import pytest

from gpuguard.demo import harness, score
from gpuguard.model import settings
from gpuguard.sim import scenario, state, store
from tests.admission import IMAGE, failed_rules

GUARD = settings.GuardSettings.load(None, {"GPUGUARD_CONTROLLER__IMAGE": IMAGE})
CARD = state.new_uuid("gpu-node-a/0000:2a:00.0")
OPERAND = "nvidia.com/gpu.deploy.device-plugin"
OPERATOR_POD = "nvidia-device-plugin-daemonset-"
PLAY = f"""\
name: gpu-operator-route
description: one DBE on a GPU Operator node; a plugin restart, a reboot, then the card back
start: "2026-08-10T00:00:00Z"
duration: 3h
fleet:
  nodes: [gpu-node-a]
  gpus_per_node: 4
  model: NVIDIA RTX PRO 6000 Blackwell Server Edition
  gpu_operator: true
events:
  - {{at: 10m, dbe: {{node: gpu-node-a, gpu: 1}}}}
  - {{at: 40m, device_plugin_restart: {{node: gpu-node-a}}}}
  - {{at: 1h, reboot: {{node: gpu-node-a}}}}
  - {{at: 2h, annotate: {{node: gpu-node-a, key: gpuguard.io/gpu-return, value: "{CARD}"}}}}
expect:
  isolate_gpus: [gpu-node-a/1]
"""


@pytest.fixture(scope="module")
def run() -> harness.ScenarioRun:
    return harness.play(scenario.loads(PLAY), GUARD)


def details(run: harness.ScenarioRun, kind: str) -> list[str]:
    return [e["detail"] for e in score.timeline(run)
            if e["kind"] == kind and e["reason"] != "escalated"]


def test_the_card_is_out_across_a_plugin_restart_and_a_reboot(run: harness.ScenarioRun) -> None:
    applied = details(run, "gpu")
    assert "not applied yet" in applied[0]
    assert "booted again" in applied[1]
    assert "back in service" in applied[-1]
    assert details(run, "device_plugin_switch") == [
        "device plugin instance 'excluding:0-2-3': allocatable 3/3",
        "device plugin instance 'cluster': allocatable 4/4",  # the return
    ]
    assert details(run, "device_plugin_restart") == ["GPUs re-enumerated: allocatable 3/3"]
    report = score.scenario_report(run)
    assert report["isolated"] == []
    assert report["healthy_gpu_hours_out"] == 0


def test_the_operators_plugin_leaves_while_the_card_is_out_and_comes_back_after(
    run: harness.ScenarioRun,
) -> None:
    changes = run.played.store.changes_since(0)
    operand = [c.object["metadata"]["labels"].get(OPERAND) for c in changes
               if c.kind == "Node" and c.type is store.ChangeType.MODIFIED]
    assert "false" in operand
    plugin = [c.type for c in changes
              if c.kind == "Pod" and c.object["metadata"]["name"].startswith(OPERATOR_POD)
              and c.type is not store.ChangeType.MODIFIED]
    assert plugin == [store.ChangeType.ADDED, store.ChangeType.DELETED, store.ChangeType.ADDED]
    node = run.played.store.get("Node", "", "gpu-node-a")
    labels = node["metadata"]["labels"]
    assert labels[OPERAND] == "true"  # removed by gpuguard, set again by the operator
    assert not any(k.startswith("gpuguard.io/") for k in labels)
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert run.played.node("gpu-node-a").gpu(1).compute_mode == "DEFAULT"


def test_every_job_of_the_route_is_one_the_admission_policy_admits(
    run: harness.ScenarioRun,
) -> None:
    jobs = run.played.store.list("Job")
    assert len(jobs) >= 3  # apply, re-apply after the boot, undo (and the burn-in)
    assert all(failed_rules(job) == [] for job in jobs)
