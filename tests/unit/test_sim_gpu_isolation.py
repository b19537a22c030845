"""Per-GPU advertising in the simulated world, against the real host-side isolation
(agent.gpu_isolation, through the simulator's driver): what the device plugin advertises,
where pods land, what a job started on the host outside Kubernetes gets, and what a plugin
restart, a GPU reset and a reboot undo."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from gpuguard.agent import gpu_isolation as host
from gpuguard.catalog import xid as xid_catalog
from gpuguard.demo import job_commands
from gpuguard.model import annotation_keys
from gpuguard.sim import state, world
from tests import sim_worlds

CLASSES = xid_catalog.packaged_catalog()  # the classes without a cluster override file

FLEET = """\
name: t
start: "2026-09-10T13:00:00Z"
duration: 2h
fleet:
  nodes: [gpu-node-a]
  gpus_per_node: 4
events:
  - {at: 1m, dbe: {node: gpu-node-a, gpu: 1}}
"""


def build(events: str = "") -> world.World:
    text = FLEET + "".join(f"  - {line}\n" for line in events.strip().splitlines())
    return sim_worlds.stepped(text, timedelta(minutes=2))


def node(w: world.World) -> state.SimNode:
    return w.node("gpu-node-a")


def advertised(w: world.World) -> tuple[str, str]:
    status = w.store.get("Node", "", "gpu-node-a")["status"]
    return status["capacity"]["nvidia.com/gpu"], status["allocatable"]["nvidia.com/gpu"]


def isolate(w: world.World, tmp_path: Path, *, label: bool = True) -> host.Report:
    """What gpuguard does: the isolation Job's host side, then the node label."""
    bad = node(w).gpu(1).uuid
    report = host.apply(job_commands.SimulatedDriver(node(w)), [bad], tmp_path, CLASSES)
    if label:
        labels = {annotation_keys.DEVICE_PLUGIN_LABEL: "excluding",
                  annotation_keys.DEVICE_PLUGIN_VISIBLE_LABEL: "0-2-3"}
        w.store.merge_patch("Node", "", "gpu-node-a", {"metadata": {"labels": labels}})
    return report


def step(w: world.World, minutes: int) -> None:
    w.step_to(w.elapsed + timedelta(minutes=minutes))


def last(w: world.World, kind: str) -> str:
    return [e.detail for e in w.timeline if e.kind == kind][-1]


def test_a_plugin_restart_re_advertises_a_gpu_it_marked_unhealthy() -> None:
    w = build("{at: 10m, device_plugin_restart: {node: gpu-node-a}}")
    assert advertised(w) == ("4", "3")
    step(w, 10)
    assert advertised(w) == ("4", "4")  # the bad card is back in the pool


def test_the_isolation_takes_the_gpu_out_of_advertising_and_host_jobs(tmp_path: Path) -> None:
    w = build("""
{at: 20m, host_job: {node: gpu-node-a, gpu: 1, name: docker-train}}
{at: 21m, host_job: {node: gpu-node-a, gpu: 0, name: docker-ok}}
{at: 22m, workload: {node: gpu-node-a, gpus: 4, name: four}}
{at: 23m, workload: {node: gpu-node-a, gpus: 3, name: three}}
""")
    report = isolate(w, tmp_path)
    assert report.ok
    step(w, 1)
    assert advertised(w) == ("3", "3")
    step(w, 30)
    blocked, ok = [e.detail for e in w.timeline if e.kind == "host_job"]
    assert "docker-train fails on GPU 1: cudaErrorDevicesUnavailable" in blocked
    assert "docker-ok Running on GPU 0" in ok
    placed = [e.detail for e in w.timeline if e.kind == "workload"]
    assert "Insufficient nvidia.com/gpu" in placed[0]
    assert "three Running on GPU [0, 2, 3]" in placed[1]


def test_the_excluding_plugin_keeps_it_out_across_restarts_and_resets(tmp_path: Path) -> None:
    w = build("""
{at: 20m, device_plugin_restart: {node: gpu-node-a}}
{at: 30m, gpu_reset: {node: gpu-node-a, gpu: 1}}
""")
    isolate(w, tmp_path)
    step(w, 25)
    assert advertised(w) == ("3", "3")
    step(w, 10)
    assert advertised(w) == ("3", "3")
    # a GPU reset re-initialises the GPU: the safety net is gone until re-applied
    assert node(w).gpu(1).compute_mode == "DEFAULT"


def test_without_the_label_a_plugin_restart_re_advertises_the_isolated_gpu(
    tmp_path: Path,
) -> None:
    w = build("{at: 20m, device_plugin_restart: {node: gpu-node-a}}")
    isolate(w, tmp_path, label=False)
    step(w, 25)
    assert advertised(w) == ("4", "4")
    assert node(w).gpu(1).compute_mode == "PROHIBITED"  # only the safety net still holds


def test_a_reboot_keeps_the_exclusion_but_resets_compute_mode(tmp_path: Path) -> None:
    w = build("""
{at: 20m, reboot: {node: gpu-node-a}}
{at: 40m, host_job: {node: gpu-node-a, gpu: 1, name: after-boot}}
""")
    isolate(w, tmp_path)
    step(w, 45)
    assert advertised(w) == ("3", "3")  # the host list is on disk
    assert "after-boot Running on GPU 1" in last(w, "host_job")  # compute mode reset


def test_undo_puts_the_gpu_back(tmp_path: Path) -> None:
    w = build()
    isolate(w, tmp_path)
    step(w, 1)
    bad = node(w).gpu(1).uuid
    report = host.undo(job_commands.SimulatedDriver(node(w)), [bad], tmp_path, CLASSES)
    labels = {annotation_keys.DEVICE_PLUGIN_LABEL: None,
              annotation_keys.DEVICE_PLUGIN_VISIBLE_LABEL: None}
    w.store.merge_patch("Node", "", "gpu-node-a", {"metadata": {"labels": labels}})
    step(w, 1)
    assert report.ok
    assert advertised(w) == ("4", "4")
    assert node(w).gpu(1).compute_mode == "DEFAULT"
    assert node(w).excluded_uuids == set()


def test_nvreg_excluded_gpus_leave_enumeration_at_the_next_boot(tmp_path: Path) -> None:
    w = build("""
{at: 10m, nvreg_exclude: {node: gpu-node-a, gpu: 1}}
{at: 20m, reboot: {node: gpu-node-a}}
{at: 40m, host_job: {node: gpu-node-a, gpu: 1, name: docker-train}}
""")
    step(w, 10)
    assert advertised(w) == ("4", "3")  # configured, not yet loaded
    step(w, 30)
    assert advertised(w) == ("3", "3")
    assert "no such device" in last(w, "host_job")
    # the isolation Job finds a card the driver does not attach: it is out, nothing to set
    uuid = node(w).gpu(1).uuid
    report = host.apply(job_commands.SimulatedDriver(node(w)), [uuid], tmp_path, CLASSES)
    assert report.ok
    assert report.gpus[0].compute_mode == host.ABSENT
