"""The Kubernetes objects of the simulated cluster, shaped as the real API returns them.

The world (``sim.world``) creates these in the store and keeps their *status* in step with
``state.SimNode``: Node objects (labels as RKE2 + GPU Operator set them, ``status.capacity``/
``allocatable`` with ``nvidia.com/gpu`` as strings, ``nodeInfo.bootID``, conditions), the
per-node system pods whose readiness the guard reads (kube-proxy, the canal CNI,
gpu-feature-discovery, dcgm-exporter, the device plugin), and workload pods that request GPUs.
Only functions of their inputs live here; no store, no clock.
"""

from __future__ import annotations

import hashlib
import uuid as uuidlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuguard.model import timestamps
from gpuguard.sim import gpu_operator, state

Obj = dict[str, Any]
GPU_RESOURCE = "nvidia.com/gpu"
CONTROL_PLANE_VERSION = "v1.34.3+rke2r1"
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # what Kubernetes uses for generated names


@dataclass(frozen=True)
class SystemPod:
    """A per-node system pod: where it lives, how it is named and labelled."""

    component: str
    namespace: str
    prefix: str
    labels: tuple[tuple[str, str], ...]
    static: bool = False  # a static pod is named <prefix><node>, a DaemonSet pod gets a suffix


SYSTEM_PODS = (
    SystemPod("kube-proxy", "kube-system", "kube-proxy-",
              (("component", "kube-proxy"), ("tier", "control-plane")), static=True),
    SystemPod("canal", "kube-system", "rke2-canal-", (("k8s-app", "canal"),)),
    SystemPod("gpu-feature-discovery", "gpu-operator", "gpu-feature-discovery-",
              (("app", "gpu-feature-discovery"),)),
    SystemPod("dcgm-exporter", "gpu-operator", "nvidia-dcgm-exporter-",
              (("app", "nvidia-dcgm-exporter"),)),
    SystemPod("device-plugin", "gpu-operator", "nvidia-device-plugin-daemonset-",
              (("app", "nvidia-device-plugin-daemonset"),)),
)


def timestamp(at: datetime) -> str:
    """A Kubernetes object's time (``metav1.Time``), as gpuguard writes its own."""
    return timestamps.format_utc(at)


def pod_name(pod: SystemPod, node: str) -> str:
    if pod.static:
        return pod.prefix + node
    digest = hashlib.sha1(f"{node}/{pod.component}".encode()).digest()
    return pod.prefix + "".join(_SUFFIX_ALPHABET[b % len(_SUFFIX_ALPHABET)] for b in digest[:5])


GFD_DRIVER_LABEL = "nvidia.com/cuda.driver-version.full"
"""gpu-feature-discovery's label of the loaded driver (relabelled when the driver changes:
``sim.change_tool``)."""


def node_object(node: state.SimNode, created: datetime, index: int) -> Obj:
    """A Node as kubectl get -o json shows it; status comes from ``node_status``."""
    product = node.gpus[0].model.replace(" ", "-") if node.gpus else ""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "creationTimestamp": timestamp(created),
            "labels": {
                "kubernetes.io/hostname": node.name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node-role.kubernetes.io/worker": "true",
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.count": str(len(node.gpus)),
                GFD_DRIVER_LABEL: node.driver_module,
                **(gpu_operator.node_labels() if node.gpu_operator else {}),
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {"podCIDR": f"10.42.{index % 256}.0/24"},
        "status": {"addresses": [
            {"type": "InternalIP", "address": f"10.0.{index // 250}.{10 + index % 250}"},
            {"type": "Hostname", "address": node.name},
        ]},
    }


def node_status(node: state.SimNode, now: datetime, ready_since: datetime) -> Obj:
    """The status fields the world owns (merge-patched; spec and annotations are untouched)."""
    gpus = {"capacity": str(node.gpu_capacity), "allocatable": str(node.gpu_allocatable_at(now))}
    return {
        "capacity": _resources(gpus["capacity"]),
        "allocatable": _resources(gpus["allocatable"]),
        "conditions": _conditions(node.ready, ready_since),
        "nodeInfo": {
            "bootID": node.boot_id,
            "kubeletVersion": node.kubelet_version,
            "kubeProxyVersion": node.kubelet_version,
            "kernelVersion": node.kernel_release,
            "osImage": "Ubuntu 22.04.5 LTS",
            "containerRuntimeVersion": "containerd://2.0.5-k3s1",
            "operatingSystem": "linux",
            "architecture": "amd64",
            "machineID": hashlib.md5(node.name.encode()).hexdigest(),
            "systemUUID": str(uuidlib.uuid5(uuidlib.NAMESPACE_OID, node.name)),
        },
    }


def _resources(gpus: str) -> Obj:
    return {"cpu": "128", "memory": "1056466944Ki", "pods": "110", GPU_RESOURCE: gpus}


def _conditions(ready: bool, since: datetime) -> list[Obj]:
    when = timestamp(since)
    pressure = [
        {"type": kind, "status": "False", "reason": f"KubeletHas{reason}",
         "lastHeartbeatTime": when, "lastTransitionTime": when}
        for kind, reason in (("MemoryPressure", "SufficientMemory"),
                             ("DiskPressure", "NoDiskPressure"),
                             ("PIDPressure", "SufficientPID"))
    ]
    ready_condition = (
        {"type": "Ready", "status": "True", "reason": "KubeletReady",
         "message": "kubelet is posting ready status"}
        if ready else
        {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
         "message": "Kubelet stopped posting node status."}
    )
    return [*pressure, {**ready_condition, "lastHeartbeatTime": when, "lastTransitionTime": when}]


def system_pod_object(pod: SystemPod, node: str, created: datetime) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod_name(pod, node), "namespace": pod.namespace,
                     "labels": dict(pod.labels), "creationTimestamp": timestamp(created)},
        "spec": {"nodeName": node, "containers": [{"name": pod.component, "image": pod.component}]},
    }


def system_pod_status(pod: SystemPod, ready: bool, restarts: int, started: datetime) -> Obj:
    flag = "True" if ready else "False"
    return {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": flag}, {"type": "ContainersReady",
                                                           "status": flag}],
        "containerStatuses": [{
            "name": pod.component, "ready": ready, "restartCount": restarts, "started": ready,
            "image": pod.component, "imageID": "",
            "state": {"running": {"startedAt": timestamp(started)}} if ready else
            {"waiting": {"reason": "CrashLoopBackOff"}},
        }],
    }


def workload_pod(name: str, namespace: str, gpus: int, profile: str, created: datetime) -> Obj:
    """A pod requesting ``gpus`` GPUs, not yet bound (Pending) — ``bind``/``finish`` move it on."""
    limits = {GPU_RESOURCE: str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": timestamp(created),
                     "labels": {"app": name, "gpuguard.sim/profile": profile}},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "main", "image": "nvcr.io/nvidia/pytorch:25.08-py3",
            "resources": {"requests": dict(limits), "limits": dict(limits)},
        }]},
        "status": {"phase": "Pending"},
    }


def bound(pod: Obj, node: str, started: datetime) -> Obj:
    pod["spec"]["nodeName"] = node
    pod["status"] = {
        "phase": "Running", "startTime": timestamp(started),
        "conditions": [{"type": "PodScheduled", "status": "True"},
                       {"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0, "started": True,
                               "image": "workload", "imageID": "",
                               "state": {"running": {"startedAt": timestamp(started)}}}],
    }
    return pod


def unschedulable(pod: Obj, reason: str) -> Obj:
    pod["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": reason},
    ]}
    return pod


def admission_failed(pod: Obj, node: str) -> Obj:
    """The seed's device-plugin bug: a GPU off the bus makes every GPU allocation fail."""
    pod["spec"]["nodeName"] = node
    pod["status"] = {
        "phase": "Failed", "reason": "UnexpectedAdmissionError",
        "message": "Allocate failed due to rpc error: code = Unknown desc = "
                   "GetPreferredAllocation failed: nvml: GPU is lost, which is unexpected",
    }
    return pod


def finished_status(outcome: str, started: datetime, ended: datetime) -> Obj:
    """Pod status at the end: Succeeded (exit 0) or Failed (exit 137, the SIGKILL of the phantom
    incident (docs/design.md#incidents))."""
    exit_code, reason = (0, "Completed") if outcome == "Succeeded" else (137, "Error")
    return {
        "phase": outcome,
        "conditions": [{"type": "PodScheduled", "status": "True"},
                       {"type": "Ready", "status": "False", "reason": "PodCompleted"}],
        "containerStatuses": [{"name": "main", "ready": False, "restartCount": 0, "started": False,
                               "image": "workload", "imageID": "",
                               "state": {"terminated": {
                                   "exitCode": exit_code, "reason": reason,
                                   "startedAt": timestamp(started),
                                   "finishedAt": timestamp(ended)}}}],
    }
