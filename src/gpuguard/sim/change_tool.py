"""The world's applying tool for declared changes, and gpu-feature-discovery's driver label.

gpuguard never installs anything itself: for a change declared with the external method it
annotates a node ``gpuguard.io/change-requested=NAME`` and waits for the tool that applies
changes (an Ansible run, a person) to mark it ``gpuguard.io/change-applied=NAME``
(docs/change-management.md). This module is that tool in the simulator: on a request it
installs the change's driver the way apt does on a host driver (the NVML library now, the
kernel module at the next boot: ``reactions.on_driver_upgrade``) and its kernel (booted next),
reboots the node, and marks it done once the node is back. The node then boots as it is
configured — without ``ip_vs`` when its persistence was never written
(``host_config: {ip_vs_persisted: false}``).

A change applied by a Job (method job) is the same install and reboot, done when the Job's pod
runs on the node (``run_job``: the script of the admin's template, as the simulated kubelet
runs it).

gpu-feature-discovery relabels a node with the loaded driver's version
(``nvidia.com/cuda.driver-version.full``) after the driver changes; the world does the same.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuguard.sim import kube_objects, reactions, scenario, state

REQUESTED = "gpuguard.io/change-requested"  # gpuguard's request (docs/change-management.md)
APPLIED = "gpuguard.io/change-applied"  # the tool's "done"
TOOL = "change-tool"  # the field manager of the tool's writes
GFD = "gpu-feature-discovery"
JOB_KIND = "gpuguard.io/job"  # the kind label on gpuguard's Jobs and their pods


def follow(w: reactions.Stage, nodes: Iterable[state.SimNode]) -> None:
    """One pass of the tool and of gpu-feature-discovery over every node."""
    for node in nodes:
        meta = w.store.get("Node", "", node.name)["metadata"]
        _relabel(w, node, meta.get("labels") or {})
        annotations = meta.get("annotations") or {}
        wanted = annotations.get(REQUESTED)
        if not wanted or annotations.get(APPLIED) == wanted:
            continue
        started = w.memory.applying.get(node.name)
        if started is None or started[0] != wanted:
            _start(w, node, wanted)
        elif node.boot_id != started[1] and node.ready:
            patch = {"metadata": {"annotations": {APPLIED: wanted}}}
            w.store.merge_patch("Node", "", node.name, patch, manager=TOOL)
            del w.memory.applying[node.name]
            w.record("change_applied", node.name, f"change {wanted} applied: kernel "
                     f"{node.kernel_release}, driver {node.driver_module}, ip_vs "
                     f"{'loaded' if node.ipvs_loaded else 'NOT loaded'}")


def _start(w: reactions.Stage, node: state.SimNode, name: str) -> None:
    w.memory.applying[node.name] = (name, node.boot_id)
    _install_and_reboot(w, node, name)


def run_job(w: reactions.Stage, node: state.SimNode) -> tuple[int, str]:
    """A change's Job (method job) runs its template's script on ``node``: the change named
    in its pod's ``GPUGUARD_CHANGE`` is installed and a reboot scheduled, and the script
    exits 0 (a Job that rebooted its own node mid-run would end Failed)."""
    name = _running_change(w, node.name)
    if name is None or name not in w.memory.playbooks:
        return 1, f"no change to apply on {node.name}"
    _install_and_reboot(w, node, name)
    return 0, f"change {name} installed, reboot scheduled"


def _running_change(w: reactions.Stage, node: str) -> str | None:
    for pod in w.store.list("Pod"):
        labels = pod["metadata"].get("labels") or {}
        if (pod["spec"].get("nodeName") == node and labels.get(JOB_KIND) == "change"
                and (pod.get("status") or {}).get("phase") == "Running"):
            env = pod["spec"]["containers"][0].get("env") or []
            return next((e["value"] for e in env if e["name"] == "GPUGUARD_CHANGE"), None)
    return None


def _install_and_reboot(w: reactions.Stage, node: state.SimNode, name: str) -> None:
    driver, kernel = w.memory.playbooks.get(name, (None, None))
    if driver is not None:
        upgrade = scenario.DriverUpgradePayload(node=node.name, version=driver, kernel=kernel)
        reactions.on_driver_upgrade(w, upgrade, node)
    elif kernel is not None:
        node.pending_kernel_release = kernel
    w.record("change_apply", node.name, f"change {name}: installing, then a reboot")
    reactions.on_reboot(w, scenario.RestartPayload(node=node.name), node)


def _relabel(w: reactions.Stage, node: state.SimNode, labels: dict[str, str]) -> None:
    if not node.ready or labels.get(kube_objects.GFD_DRIVER_LABEL) == node.driver_module:
        return
    patch = {"metadata": {"labels": {kube_objects.GFD_DRIVER_LABEL: node.driver_module}}}
    w.store.merge_patch("Node", "", node.name, patch, manager=GFD)
