"""Jobs of several GPU pods, placed as their scheduler would (docs/fleet-health.md#gang-deadlock).

- ``default`` (kube-scheduler) schedules one pod at a time: each pod goes to a feasible node
  (here the first in fleet order with enough free GPUs, schedulable and Ready) or stays Pending
  with ``PodScheduled=False``/``Unschedulable`` ("0/N nodes are available: N Insufficient
  nvidia.com/gpu."), whatever happened to its siblings
  (https://kubernetes.io/docs/concepts/scheduling-eviction/kube-scheduler/).
- ``volcano`` schedules a PodGroup all or nothing: no pod binds until ``minMember`` pods fit
  (https://volcano.sh/en/docs/podgroup/); otherwise every pod waits, holding nothing.
- ``kueue`` admits a workload against quota, not against placement: not admitted, its pods stay
  behind a scheduling gate; admitted, kube-scheduler places them pod by pod, and "two such jobs
  may deadlock if the physical availability of resources do not match the configured quotas"
  (Kueue docs, waitForPodsReady). Here the quota is the fleet's free GPUs.

Each pod carries its marker (label or annotation, ``policy.gang.MARKERS`` in the product) and an
owner reference; placed pods run a training profile on their GPUs like any workload.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from gpuguard.sim import kube_objects, scenario, state, store

GPU_RESOURCE = "nvidia.com/gpu"
KUEUE_GATE = "kueue.x-k8s.io/admission"


class GangStage(Protocol):
    """What placing a job needs of the world (``sim.world.World``)."""

    nodes: list[state.SimNode]
    store: store.ObjectStore

    def record(self, kind: str, node: str | None, detail: str) -> None: ...


@dataclass(frozen=True)
class Owner:
    api_version: str
    kind: str


# The owner and marker each system gives its pods (the product reads the same table).
OWNERS = {
    "job": Owner("batch/v1", "Job"),
    "volcano": Owner("batch.volcano.sh/v1alpha1", "Job"),
    "coscheduling": Owner("batch/v1", "Job"),
    "kueue": Owner("", ""),  # plain pods: no owner
    "training-operator": Owner("kubeflow.org/v1", "PyTorchJob"),
    "jobset": Owner("jobset.x-k8s.io/v1alpha2", "JobSet"),
    "kuberay": Owner("ray.io/v1", "RayCluster"),
    "none": Owner("", ""),
}
_DEFAULT_MARKER = {"default": "job", "volcano": "volcano", "kueue": "kueue"}


def marks(p: scenario.GangJobPayload) -> tuple[dict[str, str], dict[str, str]]:
    """The pods' labels and annotations for the job's marker."""
    marker = p.marker or _DEFAULT_MARKER[p.scheduler]
    labels = {
        "job": {"batch.kubernetes.io/job-name": p.name, "job-name": p.name},
        "volcano": {"volcano.sh/job-name": p.name},
        "coscheduling": {"scheduling.x-k8s.io/pod-group": p.name},
        "kueue": {"kueue.x-k8s.io/pod-group-name": p.name},
        "training-operator": {"training.kubeflow.org/job-name": p.name,
                              "training.kubeflow.org/replica-type": "worker"},
        "jobset": {"jobset.sigs.k8s.io/jobset-name": p.name},
        "kuberay": {"ray.io/cluster": p.name},
        "none": {},
    }[marker]  # fmt: skip
    annotations = {
        "volcano": {"scheduling.k8s.io/group-name": p.name},
        "kueue": {"kueue.x-k8s.io/pod-group-total-count": str(p.pods)},
    }.get(marker, {})
    return labels, annotations


def free_gpus(node: state.SimNode, objects: store.ObjectStore, now: datetime) -> int:
    spec = objects.get("Node", "", node.name).get("spec", {})
    if spec.get("unschedulable") or not node.ready:
        return 0
    held = sum(len(w.gpus) for w in node.workloads)
    return max(0, node.gpu_allocatable_at(now) - held)


def fit(free: dict[str, int], wanted: int) -> str | None:
    """First node in fleet order with ``wanted`` free GPUs (taken from ``free``)."""
    name = next((n for n, count in free.items() if count >= wanted), None)
    if name is not None:
        free[name] -= wanted
    return name


def plan(w: GangStage, p: scenario.GangJobPayload, now: datetime) -> list[str | None]:
    """Where each pod goes (None: Pending) under ``p.scheduler``."""
    free = {n.name: free_gpus(n, w.store, now) for n in w.nodes}
    if p.scheduler == "kueue" and sum(free.values()) < p.pods * p.gpus_per_pod:
        return [None] * p.pods  # not admitted: gated, nothing bound
    placed = [fit(free, p.gpus_per_pod) for _ in range(p.pods)]
    if p.scheduler == "volcano" and None in placed:
        return [None] * p.pods  # the gang does not fit: all wait
    return placed


def owner_object(p: scenario.GangJobPayload, now: datetime) -> dict[str, Any] | None:
    """The batch/v1 Job that owns the pods of a ``job``/``coscheduling`` job (the simulated
    garbage collector deletes pods whose Job is gone); None for other owners (CRDs the
    simulated API server does not serve: only the pods' owner references name them)."""
    owner = OWNERS[p.marker or _DEFAULT_MARKER[p.scheduler]]
    if owner.api_version != "batch/v1":
        return None
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": p.name, "namespace": p.namespace,
                     "creationTimestamp": kube_objects.timestamp(now)},
        "spec": {"parallelism": p.pods, "completions": p.pods,
                 "template": {"spec": {"containers": [{"name": "main"}]}}},
        "status": {"active": 0},
    }  # fmt: skip


def pod_object(
    p: scenario.GangJobPayload, index: int, now: datetime, uid: str | None = None
) -> dict[str, Any]:
    name = f"{p.name}-worker-{index}"
    pod = kube_objects.workload_pod(name, p.namespace, p.gpus_per_pod, "training", now)
    labels, annotations = marks(p)
    pod["metadata"]["labels"] |= labels
    if annotations:
        pod["metadata"]["annotations"] = dict(annotations)
    owner = OWNERS[p.marker or _DEFAULT_MARKER[p.scheduler]]
    if owner.kind:
        pod["metadata"]["ownerReferences"] = [{
            "apiVersion": owner.api_version, "kind": owner.kind, "name": p.name,
            "uid": uid or state.new_boot_id(f"{p.namespace}/{p.name}"), "controller": True,
        }]  # fmt: skip
    pod["spec"]["schedulerName"] = "volcano" if p.scheduler == "volcano" else "default-scheduler"
    return pod


def waiting(
    pod: dict[str, Any], p: scenario.GangJobPayload, nodes: int, now: datetime
) -> dict[str, Any]:
    """A pod its scheduler could not place: Unschedulable since ``now``, or gated (Kueue)."""
    if p.scheduler == "kueue":
        pod["spec"]["schedulingGates"] = [{"name": KUEUE_GATE}]
        pod["status"] = {"phase": "Pending"}
        return pod
    if p.scheduler == "volcano":
        message = f"pod group is not ready, {p.pods} Pending, {p.pods} minAvailable"
    else:
        message = f"0/{nodes} nodes are available: {nodes} Insufficient {GPU_RESOURCE}."
    pod["status"] = {"phase": "Pending", "conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": message, "lastTransitionTime": kube_objects.timestamp(now),
        "lastProbeTime": None,
    }]}  # fmt: skip
    return pod


def gpus_for(node: state.SimNode, count: int) -> tuple[int, ...]:
    busy = {i for w in node.workloads for i in w.gpus}
    free = [g.index for g in node.gpus if g.registered and g.offered and g.index not in busy]
    return tuple(free[:count])


def summary(placed: Sequence[str | None]) -> str:
    bound = [n for n in placed if n]
    return f"{len(bound)} of {len(placed)} pods bound ({', '.join(sorted(set(bound))) or '-'})"
