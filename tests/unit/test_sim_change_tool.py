"""The world's applying tool: it changes only the nodes gpuguard asked for, the way apt and a
reboot do (library now, module and kernel at boot), boots them as configured (no ip_vs where
its persistence was never written) and marks them done; gpu-feature-discovery relabels."""

from __future__ import annotations

from datetime import timedelta

from gpuguard.actuators import jobs
from gpuguard.model import change
from gpuguard.sim import change_tool, clock, kube_objects, kubelet, scenario, store, world

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


def test_a_change_job_applies_the_change_when_its_pod_runs_on_the_node() -> None:
    spec = scenario.loads(SCENARIO.replace("kernel: 6.8.0-60-generic}",
                                           "kernel: 6.8.0-60-generic, job_template: host-apt}"))
    objs = store.ObjectStore()
    w = world.World.from_scenario(spec, objs, clock.SimClock(spec.start))
    w.step_to(timedelta(minutes=2))
    admin = objs.get("ConfigMap", "kube-system", "gpuguard-change-templates")["data"]
    assert admin["host-apt.privileged"] == "true"  # the admin approved a privileged installer
    template = change.job_template(admin, "host-apt")
    job = jobs.change_job("gpu-node-000", "drv", w.node("gpu-node-000").boot_id, template,
                          env={"GPUGUARD_CHANGE": "drv"}, deadline_s=7200)
    objs.create("Job", "gpuguard", job)
    ran = kubelet.JobKubelet(w, lambda node, argv: change_tool.run_job(w, node))
    ran.step()  # the Job controller makes its pod; the kubelet starts it
    assert w.node("gpu-node-000").driver_library == "580.126.09"
    w.step_to(timedelta(minutes=3))
    ran.step()  # the script ran: installed, reboot scheduled, exit 0
    changed = w.node("gpu-node-000")
    assert changed.driver_library == "580.159.03"
    assert not changed.ready
    done = objs.get("Job", "gpuguard", job["metadata"]["name"])
    assert [c["type"] for c in done["status"]["conditions"]] == ["Complete"]
    assert w.node("gpu-node-001").driver_library == "580.126.09"
