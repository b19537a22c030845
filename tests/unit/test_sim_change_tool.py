"""The world's applying tool: it changes only the nodes gpuguard asked for, the way apt and a
reboot do (library now, module and kernel at boot), boots them as configured (no ip_vs where
its persistence was never written) and marks them done; gpu-feature-discovery relabels."""

from __future__ import annotations

from datetime import timedelta

from gpuguard.sim import clock, kube_objects, scenario, store, world

SCENARIO = """
name: t
fleet: {nodes: 2, driver: "580.126.09", kernel_release: 6.8.0-45-generic}
events:
  - {at: 1m, host_config: {node: 0, ip_vs_persisted: false}}
  - {at: 1m, rollout: {name: drv, driver: "580.159.03", kernel: 6.8.0-60-generic}}
"""


def test_the_tool_changes_the_requested_node_and_marks_it_done() -> None:
    spec = scenario.loads(SCENARIO)
    objs = store.ObjectStore()
    w = world.World.from_scenario(spec, objs, clock.SimClock(spec.start))
    w.step_to(timedelta(minutes=2))
    assert objs.get("ConfigMap", "gpuguard", "drv")["metadata"]["labels"] == {
        "gpuguard.io/change": "drv"}
    request = {"metadata": {"annotations": {"gpuguard.io/change-requested": "drv"}}}
    objs.merge_patch("Node", "", "gpu-node-000", request)
    w.step_to(timedelta(minutes=3))
    changed, other = w.node("gpu-node-000"), w.node("gpu-node-001")
    assert not changed.ready
    assert changed.driver_library == "580.159.03"
    w.step_to(timedelta(minutes=10))
    w.step_to(timedelta(minutes=10, seconds=15))  # the tool looks again on the next step
    assert (changed.kernel_release, changed.driver_module) == ("6.8.0-60-generic", "580.159.03")
    assert not changed.ipvs_loaded
    assert not changed.kube_proxy_ready
    meta = objs.get("Node", "", "gpu-node-000")["metadata"]
    assert meta["annotations"]["gpuguard.io/change-applied"] == "drv"
    assert meta["labels"][kube_objects.GFD_DRIVER_LABEL] == "580.159.03"
    assert (other.driver_module, other.kernel_release) == ("580.126.09", "6.8.0-45-generic")
    labels = objs.get("Node", "", "gpu-node-001")["metadata"]["labels"]
    assert labels[kube_objects.GFD_DRIVER_LABEL] == "580.126.09"
