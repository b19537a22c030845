"""The world's reactions to scenario events, as the guard will observe them in the store."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from gpuguard.sim import clock, exporters, reactions, scenario, store, world

FLEET = """\
name: t
start: "2026-09-10T13:00:00Z"
fleet:
  nodes: [gpu-node-a, gpu-node-b]
  gpus_per_node: 8
  driver: "580.126.09"
  ipvs_persisted: {persisted}
events:
"""


def build(events: str, *, persisted: bool = True) -> world.World:
    text = FLEET.format(persisted=str(persisted).lower())
    text += "".join(f"  - {line}\n" for line in events.strip().splitlines())
    spec = scenario.loads(text)
    return world.World.from_scenario(spec, store.ObjectStore(), clock.SimClock(spec.start))


def node_obj(w: world.World, name: str = "gpu-node-b") -> dict[str, Any]:
    return w.store.get("Node", "", name)


def gpus(w: world.World, name: str = "gpu-node-b") -> tuple[str, str]:
    status = node_obj(w, name)["status"]
    return status["capacity"]["nvidia.com/gpu"], status["allocatable"]["nvidia.com/gpu"]


def ready(w: world.World, name: str = "gpu-node-b") -> str:
    conditions = node_obj(w, name)["status"]["conditions"]
    return next(c["status"] for c in conditions if c["type"] == "Ready")


def test_the_fleet_appears_in_the_store_as_real_node_objects() -> None:
    w = build("{at: 1m, reboot: {node: 0}}")
    node = node_obj(w, "gpu-node-a")
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "gpu-node-a"
    assert node["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"
    assert gpus(w, "gpu-node-a") == ("8", "8")
    assert node["status"]["nodeInfo"]["bootID"] == w.node(0).boot_id
    assert ready(w, "gpu-node-a") == "True"
    system = {p["metadata"]["name"] for p in w.store.list("Pod") if
              p["spec"]["nodeName"] == "gpu-node-a"}
    assert "kube-proxy-gpu-node-a" in system
    assert any(name.startswith("gpu-feature-discovery-") for name in system)
    assert [g.pci for g in w.node(0).gpus][:3] == ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0"]


def test_xid79_takes_the_gpu_off_the_bus_allocatable_7_capacity_8() -> None:
    w = build("{at: 10m, xid: {node: gpu-node-b, gpu: 4, xid: 79}}")
    w.step_to(timedelta(minutes=10))
    gpu = w.node("gpu-node-b").gpu(4)
    assert gpus(w) == ("8", "7")
    assert gpu.xid_last == 79
    assert not gpu.on_bus
    assert w.first_fault_at("gpu-node-b") == timedelta(minutes=10)
    assert w.first_fault_at("gpu-node-a") is None
    log = w.node("gpu-node-b").kernel_log
    assert any(line.endswith(f"NVRM: GPU at PCI:0000:99:00: {gpu.uuid}") for line in log)
    assert any(re.search(r"kernel: \[ *\d+\.\d{6}\] NVRM: Xid \(PCI:0000:99:00\): 79, "
                         r"pid='<unknown>', name=<unknown>, GPU has fallen off the bus\.$", line)
               for line in log)
    assert any(line.endswith("NVRM: fallen off the bus and is not responding to commands.")
               for line in log)


@pytest.mark.parametrize("code", [13, 31, 43, 45])
def test_user_code_xids_change_the_gauge_but_not_allocatable(code: int) -> None:
    w = build(f"{{at: 1m, xid: {{node: 1, gpu: 2, xid: {code}, pid: 4242}}}}")
    w.step_to(timedelta(minutes=2))
    assert w.node(1).gpu(2).xid_last == code
    assert gpus(w) == ("8", "8")
    assert w.first_fault_at("gpu-node-b") is None


def test_power_cycle_gives_a_new_boot_id_and_brings_the_gpu_back() -> None:
    w = build("""
{at: 10m, xid: {node: 1, gpu: 4, xid: 79}}
{at: 1d, power_cycle: {node: 1}}
""")
    w.step_to(timedelta(minutes=11))
    old_boot = node_obj(w)["status"]["nodeInfo"]["bootID"]
    w.step_to(timedelta(days=1, minutes=1))
    assert ready(w) == "Unknown"  # still powering up
    w.step_to(timedelta(days=1, minutes=10))
    assert ready(w) == "True"
    assert node_obj(w)["status"]["nodeInfo"]["bootID"] != old_boot
    assert gpus(w) == ("8", "8")
    assert w.node(1).gpu(4).on_bus
    assert w.node(1).gpu(4).xid_last is None  # dcgm-exporter restarted with the node


def test_a_warm_reboot_hangs_on_a_gpu_off_the_bus_until_a_power_cycle() -> None:
    w = build("""
{at: 10m, xid: {node: 1, gpu: 4, xid: 79}}
{at: 1h, reboot: {node: 1}}
{at: 2h, power_cycle: {node: 1}}
""")
    w.step_to(timedelta(minutes=11))
    old_boot = w.node(1).boot_id
    w.step_to(timedelta(hours=1, minutes=30))
    assert ready(w) == "Unknown"
    assert w.node(1).boot_id == old_boot
    assert not w.node(1).gpu(4).on_bus
    w.step_to(timedelta(hours=3))
    assert ready(w) == "True"
    assert w.node(1).boot_id != old_boot
    assert w.node(1).gpu(4).on_bus


def test_power_cycle_with_stay_lost_leaves_the_dead_card_unenumerated() -> None:
    w = build("""
{at: 10m, xid: {node: 1, gpu: 4, xid: 79}}
{at: 1h, power_cycle: {node: 1, stay_lost: true}}
""")
    w.step_to(timedelta(hours=2))
    assert gpus(w) == ("7", "7")


def test_exporter_restart_empties_the_xid_gauge_but_not_the_history() -> None:
    w = build("""
{at: 10m, dbe: {node: 1, gpu: 1}}
{at: 20m, dcgm_exporter_restart: {node: 1}}
""")
    w.step_to(timedelta(minutes=15))
    gpu = w.node(1).gpu(1)
    assert gpu.xid_last == 48
    assert gpu.uncorrectable_remapped_rows == 1
    w.step_to(timedelta(minutes=25))
    assert gpu.xid_last is None
    assert [code for _, code in gpu.xid_history] == [48]


def test_host_driver_upgrade_changes_the_library_now_and_the_module_at_reboot() -> None:
    w = build("""
{at: 10m, driver_upgrade: {node: 1, version: "580.159.03", kernel: 5.15.0-179-generic}}
{at: 1d, reboot: {node: 1}}
""")
    w.step_to(timedelta(hours=1))
    node = w.node(1)
    assert (node.driver_library, node.driver_module) == ("580.159.03", "580.126.09")
    assert ready(w) == "True"
    assert gpus(w) == ("8", "8")  # Kubernetes sees nothing wrong
    assert any("API mismatch" in line for line in node.kernel_log)
    w.step_to(timedelta(days=1, hours=1))
    assert (node.driver_library, node.driver_module) == ("580.159.03", "580.159.03")
    assert node_obj(w)["status"]["nodeInfo"]["kernelVersion"] == "5.15.0-179-generic"


def test_operator_driver_upgrade_dips_allocatable_then_returns() -> None:
    w = build('{at: 10m, driver_upgrade: {node: 1, version: "580.159.03", method: operator}}')
    w.step_to(timedelta(minutes=11))
    assert gpus(w) == ("8", "0")
    assert w.node(1).driver_module == "580.159.03"
    w.step_to(timedelta(minutes=14))
    assert gpus(w) == ("8", "8")


def test_reboot_without_ipvs_persistence_leaves_kube_proxy_not_ready() -> None:
    w = build("{at: 10m, reboot: {node: 1}}\n{at: 1h, ipvs_load: {node: 1}}", persisted=False)
    w.step_to(timedelta(minutes=30))
    kube_proxy = w.store.get("Pod", "kube-system", "kube-proxy-gpu-node-b")
    assert not w.node(1).ipvs_loaded
    assert kube_proxy["status"]["containerStatuses"][0]["ready"] is False
    w.step_to(timedelta(hours=2))
    kube_proxy = w.store.get("Pod", "kube-system", "kube-proxy-gpu-node-b")
    assert kube_proxy["status"]["containerStatuses"][0]["ready"] is True


def test_a_human_cordon_and_annotations_survive_the_worlds_resyncs() -> None:
    w = build("""
{at: 5m, cordon: {node: 1, key: ops.example.com/reason, value: "do not uncordon"}}
{at: 10m, xid: {node: 1, gpu: 4, xid: 79}}
{at: 1h, power_cycle: {node: 1}}
""")
    w.step_to(timedelta(minutes=6))
    w.store.merge_patch("Node", "", "gpu-node-b",
                        {"metadata": {"annotations": {"gpuguard.io/reason": "xid-79"}}})
    w.step_to(timedelta(hours=2))
    node = node_obj(w)
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"]["ops.example.com/reason"] == "do not uncordon"
    assert node["metadata"]["annotations"]["gpuguard.io/reason"] == "xid-79"
    assert gpus(w) == ("8", "8")


def test_a_workload_creates_a_gpu_pod_that_finishes() -> None:
    w = build("""
{at: 5m, phantom: {node: 0, gpu: 0}}
{at: 10m, workload: {node: 0, gpus: 2, profile: training, duration: 1h, name: job-1}}
""")
    w.step_to(timedelta(minutes=30))
    pod = w.store.get("Pod", "ml", "job-1")
    assert pod["spec"]["nodeName"] == "gpu-node-a"
    assert pod["status"]["phase"] == "Running"
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == "2"
    assert w.node(0).workload_on(1) is not None
    assert not w.node(0).gpu(0).phantom  # a workload landing on a phantom GPU clears it
    w.step_to(timedelta(hours=2))
    assert w.store.get("Pod", "ml", "job-1")["status"]["phase"] == "Succeeded"
    assert w.node(0).workloads == []


def test_a_gpu_off_the_bus_fails_every_gpu_pod_on_the_node() -> None:
    w = build("""
{at: 10m, xid: {node: 1, gpu: 4, xid: 79}}
{at: 20m, workload: {node: 1, gpus: 1, name: one-gpu}}
""")
    w.step_to(timedelta(minutes=30))
    pod = w.store.get("Pod", "ml", "one-gpu")
    assert (pod["status"]["phase"], pod["status"]["reason"]) == (
        "Failed", "UnexpectedAdmissionError")


def test_gpu_reset_fails_off_the_bus_and_restores_a_healthy_gpu() -> None:
    w = build("""
{at: 1m, dbe: {node: 1, gpu: 1}}
{at: 2m, xid: {node: 1, gpu: 2, xid: 79}}
{at: 10m, gpu_reset: {node: 1, gpu: 2}}
{at: 11m, gpu_reset: {node: 1, gpu: 1}}
""")
    w.step_to(timedelta(minutes=10))
    assert gpus(w) == ("8", "6")
    assert "reset failed" in w.timeline[-1].detail
    w.step_to(timedelta(minutes=12))
    assert w.node(1).gpu(1).offered  # the DBE GPU is offered again
    # the device plugin's restart no longer enumerates the GPU off the bus: capacity drops too
    assert gpus(w) == ("7", "7")


def test_prometheus_down_then_up() -> None:
    w = build("{at: 10m, prometheus_down: {duration: 5m}}")
    w.step_to(timedelta(minutes=11))
    assert not w.prometheus_up
    w.step_to(timedelta(minutes=16))
    assert w.prometheus_up


def test_run_steps_to_the_end_calling_the_hook_each_step() -> None:
    w = build("{at: 1m, reboot: {node: 0}}")
    seen: list[timedelta] = []
    w.run(step=timedelta(minutes=1), on_step=lambda world: seen.append(world.elapsed))
    assert seen[0] == timedelta(minutes=1)
    assert seen[-1] == w.scenario.end
    assert len(seen) == 31
    with pytest.raises(ValueError, match="cannot step back"):
        w.step_to(timedelta(0))


def test_pcie_degrade_shows_until_a_power_cycle_and_gfd_restarts_count() -> None:
    w = build("""
{at: 1m, pcie_degrade: {node: 1, gpu: 3, width: 8, speed: 16.0}}
{at: 2m, gfd_restart: {node: 1, count: 5}}
{at: 10m, reboot: {node: 1}}
{at: 1h, power_cycle: {node: 1}}
""")
    w.step_to(timedelta(minutes=30))
    gpu = w.node(1).gpu(3)
    assert (gpu.link_width, gpu.link_speed_gts) == (8, 16.0)
    gfd = next(p for p in w.store.list("Pod", "gpu-operator")
               if p["metadata"]["name"].startswith("gpu-feature-discovery-")
               and p["spec"]["nodeName"] == "gpu-node-b")
    assert gfd["status"]["containerStatuses"][0]["restartCount"] == 5
    w.step_to(timedelta(hours=2))
    assert (gpu.link_width, gpu.link_speed_gts) == (16, 32.0)


EVERY_KIND = """
{at: 1m, xid: {node: 0, gpu: 0, xid: 94}}
{at: 2m, gpu_lost: {node: 0, gpu: 1, off_bus: true}}
{at: 3m, dbe: {node: 0, gpu: 2, remap: true}}
{at: 4m, phantom: {node: 1, gpu: 0}}
{at: 5m, phantom_clear: {node: 1, gpu: 0}}
{at: 6m, workload: {node: 1, gpus: [1, 2], profile: idle, duration: 2m}}
{at: 7m, reboot: {node: 1}}
{at: 8m, power_cycle: {node: 0, stay_lost: true}}
{at: 20m, gpu_reset: {node: 1, gpu: 3}}
{at: 21m, driver_upgrade: {node: 1, version: "580.159.03"}}
{at: 22m, pcie_degrade: {node: 1, gpu: 4}}
{at: 23m, dcgm_exporter_restart: {node: 1}}
{at: 24m, device_plugin_restart: {node: 1}}
{at: 25m, gfd_restart: {node: 1}}
{at: 26m, mig_reconfig: {node: 1}}
{at: 27m, kube_proxy_down: {node: 1}}
{at: 28m, ipvs_unpersist: {node: 1}}
{at: 29m, ipvs_load: {node: 1, persist: true}}
{at: 30m, dns_upstream: {node: 1, servers: [8.8.8.8], stub: false}}
{at: 31m, cordon: {node: 1}}
{at: 32m, uncordon: {node: 1}}
{at: 33m, annotate: {node: 1, key: gpuguard.io/hold, value: "waiting for RMA"}}
{at: 34m, prometheus_down: {duration: 1m}}
{at: 35m, bad_metric: {node: 0, gpu: 2, xid: 79}}
{at: 35m, forged_metric: {node: 1, claims: gpu-node-a, gpu: 2, xid: 79, metric: agent}}
{at: 35m, exporter_down: {node: 0, duration: 2m}}
{at: 35m, job_hang: {node: 1, job: burnin}}
{at: 36m, host_job: {node: 1, gpu: 0}}
{at: 37m, nvreg_exclude: {node: 1, gpu: 7}}
{at: 38m, host_config: {node: 0, ip_vs_persisted: false}}
{at: 39m, rollout: {name: drv, driver: "580.159.03", waves: [1]}}
{at: 40m, gpu_slow: {node: 1, gpu: 6, share: 0.5}}
{at: 41m, gang_job: {name: llm, pods: 2, gpus_per_pod: 8, scheduler: volcano}}
{at: 41m, throttle: {node: 1, gpu: 1, reason: hw-thermal, duration: 5m}}
{at: 41m, nvlink_errors: {node: 1, gpu: 1, rate: 3, duration: 5m}}
{at: 41m, ib_flap: {node: 1, count: 2}}
{at: 42m, sxid: {node: 1, sxid: 20034, severity: Fatal, message: "Link 30 LTSSM Fault Up"}}
{at: 42m, fabric: {node: 1, state: Not Started}}
{at: 43m, gpu_recovery: {node: 1, gpu: 3, action: GPU Reset, logged: false}}
"""


def test_every_event_kind_applies_and_lands_on_the_timeline() -> None:
    w = build(EVERY_KIND)
    w.run(step=timedelta(minutes=1))
    kinds = {entry.kind for entry in w.timeline}
    assert kinds >= set(scenario.PAYLOADS)
    assert node_obj(w)["metadata"]["annotations"]["gpuguard.io/hold"] == "waiting for RMA"
    # Xid 94, gpu_lost and the DBE left three GPUs unhealthy; stay_lost kept them out
    assert gpus(w, "gpu-node-a") == ("5", "5")


def test_a_job_dies_with_the_gpu_that_falls_off_the_bus() -> None:
    w = build("""
{at: 1m, workload: {node: 1, gpus: [4, 5], name: train}}
{at: 10m, xid: {node: 1, gpu: 4, xid: 79}}
""")
    w.step_to(timedelta(minutes=11))
    pod = w.store.get("Pod", "ml", "train")
    assert pod["status"]["phase"] == "Failed"
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137


def test_quiet_steps_write_nothing_to_the_store() -> None:
    w = build("{at: 10m, kube_proxy_down: {node: 1}}")
    w.step_to(timedelta(minutes=1))
    before = w.store.resource_version
    w.step_to(timedelta(minutes=9))
    assert w.store.resource_version == before
    w.step_to(timedelta(minutes=11))
    assert w.store.resource_version > before


def test_scenario_options_reach_the_nodes() -> None:
    spec = scenario.loads("""\
name: t
hostname_label: hostname
xid_count_metric: true
fleet: {nodes: 2, model: NVIDIA H100 80GB HBM3, kernel_release: 5.15.0-171-generic}
""")
    w = world.World.from_scenario(spec, store.ObjectStore(), clock.SimClock(spec.start))
    assert w.node(1).hostname_label == "hostname"
    assert w.scenario.xid_count_metric
    assert w.node(0).gpus[0].model == "NVIDIA H100 80GB HBM3"
    assert node_obj(w, "gpu-node-000")["status"]["nodeInfo"]["kernelVersion"] == (
        "5.15.0-171-generic")


def test_every_event_kind_has_exactly_one_reaction() -> None:
    assert set(reactions.REACTIONS) == set(scenario.PAYLOADS)


def test_a_silent_exporter_stops_its_series_then_answers_again() -> None:
    w = build("{at: 1m, exporter_down: {node: 0, duration: 5m}}")
    node = w.node(0)
    w.step_to(timedelta(minutes=2))
    assert not exporters.exporter_up(node, w.now)
    assert exporters.exporter_up(w.node(1), w.now)
    w.step_to(timedelta(minutes=7))
    assert exporters.exporter_up(node, w.now)
    assert [e.kind for e in w.timeline if e.node == node.name] == ["exporter_down", "exporter_up"]


def test_a_job_hang_is_used_by_the_next_job_of_its_kind_only() -> None:
    w = build("{at: 1m, job_hang: {node: 1, job: evidence}}")
    w.step_to(timedelta(minutes=2))
    name = w.node(1).name
    assert not w.take_job_hang(name, "burnin")
    assert w.take_job_hang(name, "evidence")
    assert not w.take_job_hang(name, "evidence")


def test_a_condition_another_writer_set_survives_the_kubelets_updates_and_a_reboot() -> None:
    w = build("""
{at: 10m, xid: {node: 1, gpu: 4, xid: 79}}
{at: 1h, reboot: {node: 1}}
{at: 2h, power_cycle: {node: 1}}
""")
    w.step_to(timedelta(minutes=11))
    gone = {"type": "GpuFallenOffBus", "status": "True", "reason": "GpuGoneFromBus",
            "message": "gpu=4 xid=79; fell off the bus"}
    w.store.merge_patch("Node", "", "gpu-node-b", {"status": {"conditions": [gone]}},
                        scope=store.Scope.STATUS, manager="gpuguard-agent", strategic=True)
    w.step_to(timedelta(hours=1, minutes=30))
    assert ready(w) == "Unknown"  # the kubelet's own condition moved on
    old_boot = node_obj(w)["status"]["nodeInfo"]["bootID"]
    w.step_to(timedelta(hours=3))

    conditions = node_obj(w)["status"]["conditions"]
    assert ready(w) == "True"
    assert node_obj(w)["status"]["nodeInfo"]["bootID"] != old_boot
    assert gone in conditions
    assert sorted(c["type"] for c in conditions) == [
        "DiskPressure", "GpuFallenOffBus", "MemoryPressure", "PIDPressure", "Ready"]
