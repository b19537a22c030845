"""The simulated GPU Operator (sim/gpu_operator.py): its operand labels on the nodes it
manages, its device-plugin pod following ``nvidia.com/gpu.deploy.device-plugin``, and its
privileged plugin advertising every GPU wherever it runs."""

from __future__ import annotations

from datetime import timedelta

from gpuguard.model import annotation_keys
from gpuguard.sim import clock, scenario, store, world

FLEET = """\
name: t
start: "2026-09-10T13:00:00Z"
duration: 1h
fleet:
  nodes: [gpu-node-a]
  gpus_per_node: 4
  gpu_operator: true
"""
OPERAND = "nvidia.com/gpu.deploy.device-plugin"
CHART = {annotation_keys.DEVICE_PLUGIN_LABEL: "excluding",
         annotation_keys.DEVICE_PLUGIN_VISIBLE_LABEL: "0-2-3"}


def build() -> world.World:
    spec = scenario.loads(FLEET)
    w = world.World.from_scenario(spec, store.ObjectStore(), clock.SimClock(spec.start))
    w.step_to(timedelta(minutes=1))
    return w


def label(w: world.World, labels: dict[str, str | None]) -> None:
    w.store.merge_patch("Node", "", "gpu-node-a", {"metadata": {"labels": labels}})
    w.step_to(w.elapsed + timedelta(minutes=1))


def state_of(w: world.World) -> tuple[str, str | None, list[str]]:
    node = w.store.get("Node", "", "gpu-node-a")
    pods = [p["metadata"]["name"] for p in w.store.list("Pod")
            if p["metadata"]["name"].startswith("nvidia-device-plugin-daemonset-")]
    return (node["status"]["allocatable"]["nvidia.com/gpu"],
            node["metadata"]["labels"].get(OPERAND), pods)


def test_the_chart_plugin_alone_does_not_hide_a_gpu_from_the_operators_plugin() -> None:
    w = build()
    label(w, dict(CHART))
    allocatable, operand, pods = state_of(w)
    assert (allocatable, operand, len(pods)) == ("4", "true", 1)


def test_the_operand_label_moves_the_operators_plugin_off_and_back() -> None:
    w = build()
    label(w, {OPERAND: "false", **CHART})
    assert state_of(w) == ("3", "false", [])
    label(w, {OPERAND: "false", **dict.fromkeys(CHART)})  # no plugin at all
    assert state_of(w)[:2] == ("0", "false")
    label(w, {OPERAND: None})  # the operator sets its missing label to true
    allocatable, operand, pods = state_of(w)
    assert (allocatable, operand, len(pods)) == ("4", "true", 1)
