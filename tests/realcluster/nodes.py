"""Nodes on the real control plane without kubelets: what a kubelet would register (a Node
with its GPUs in capacity, Ready) and renew (its Lease in kube-node-lease, every few seconds;
without it the node lifecycle controller marks the Node NotReady after its grace period and
taints it unreachable — kubernetes.io/docs/concepts/architecture/nodes/#node-heartbeats)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from gpuguard.sim.control_plane import cluster

RENEW_S = 5.0


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def gpu_node(name: str, gpus: int = 8) -> dict[str, object]:
    """A Node as a GPU node's kubelet and the device plugin register it."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true"},
        },
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": stamp,
                    "lastTransitionTime": stamp,
                }
            ],
        },
    }


@contextmanager
def registered(
    plane: cluster.ControlPlane, names: Sequence[str], objects: Sequence[dict[str, Any]] = ()
) -> Iterator[None]:
    """The Nodes created (``objects``, e.g. a simulated world's, or plain GPU nodes) and
    their Leases renewed until exit (then both deleted)."""
    given = {o["metadata"]["name"]: o for o in objects}
    for name in names:
        node = _registrable(given[name]) if name in given else gpu_node(name)
        status, body = plane.request("POST", "/api/v1/nodes", node)
        assert status == 201, body
    stop = threading.Event()

    def renew() -> None:
        while not stop.is_set():
            for name in names:
                _renew(plane, name)
            stop.wait(RENEW_S)

    beat = threading.Thread(target=renew, name="node-leases", daemon=True)
    beat.start()
    try:
        yield
    finally:
        stop.set()
        beat.join()
        for name in names:  # as the node lifecycle controller deletes a Node whose
            # instance is gone (gpuguard-node-integrity lets nobody else delete an isolated one)
            plane.request("DELETE", f"/api/v1/nodes/{name}", as_user=(
                "system:serviceaccount:kube-system:node-controller", "system:serviceaccounts",
                "system:serviceaccounts:kube-system", "system:authenticated"))


def _registrable(node: dict[str, Any]) -> dict[str, Any]:
    """A stored Node as a kubelet registers it (no server-set fields)."""
    metadata = {k: v for k, v in node["metadata"].items() if k in ("name", "labels", "annotations")}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": metadata,
        "spec": node.get("spec", {}),
        "status": node.get("status", {}),
    }


def _renew(plane: cluster.ControlPlane, name: str) -> None:
    path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": _now()},
    }
    status, _ = plane.request(
        "PATCH", path, {"spec": lease["spec"]}, content_type="application/merge-patch+json"
    )
    if status == 404:
        plane.request(
            "POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", lease
        )
