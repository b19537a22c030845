"""Pods for the gang-deadlock detector (``policy.gang``): Kubernetes Pod JSON reduced to
``model.workloads.WorkloadPod`` — owner references, scheduler, the gang markers in labels and
annotations, ``spec.workloadRef`` / ``spec.schedulingGroup``, ``spec.schedulingGates`` and the
``PodScheduled`` condition: the scheduler sets ``PodScheduled=False`` with reason
``Unschedulable`` when it cannot place a pod
(https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-conditions).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from datetime import datetime
from typing import Any

from lightkube import Client

from gpuguard.clients import kube_lists
from gpuguard.model import timestamps, workloads

GPU_RESOURCE = "nvidia.com/gpu"
UNSCHEDULABLE = "Unschedulable"


class GangPodReader:
    """Lists every unfinished pod of the cluster as ``WorkloadPod`` (a paged list of raw
    JSON, ``clients.kube_lists``)."""

    def __init__(self, client: Client, api: kube_lists.RawApi | None = None) -> None:
        self._api = kube_lists.SharedApi(lambda: client.config, api)

    def pods(self) -> tuple[workloads.WorkloadPod, ...]:
        found = self._api.get().list_all(kube_lists.UNFINISHED_PODS, workload_pod).items
        return tuple(p for p in found if not p.finished)


def workload_pod(
    obj: Mapping[str, Any], annotations: Collection[str] | None = None
) -> workloads.WorkloadPod:
    """A Pod's JSON (``to_dict()`` or the API's) as the detector reads it; with
    ``annotations``, only those of its annotations are kept (a cache of 100,000 pods need
    not hold every tool's annotations)."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    kept: Mapping[str, str] = meta.get("annotations") or {}
    if annotations is not None:
        kept = {k: v for k in annotations if (v := kept.get(k)) is not None}
    conditions: list[Mapping[str, Any]] = status.get("conditions") or []
    scheduled: Mapping[str, Any] = next(
        (c for c in conditions if c.get("type") == "PodScheduled"), {}
    )
    unschedulable = scheduled.get("status") == "False" and scheduled.get("reason") == UNSCHEDULABLE
    return workloads.WorkloadPod(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        node=spec.get("nodeName") or None,
        phase=str(status.get("phase") or "Unknown"),
        gpu_request=_gpus(spec.get("containers") or []),
        labels=dict(meta.get("labels") or {}),
        annotations=dict(kept),
        owners=tuple(_owner(o) for o in meta.get("ownerReferences") or []),
        scheduler=str(spec.get("schedulerName") or "default-scheduler"),
        created=_time(meta.get("creationTimestamp")),
        unschedulable_since=_time(scheduled.get("lastTransitionTime")) if unschedulable else None,
        unschedulable_message=str(scheduled.get("message") or "") if unschedulable else "",
        gated=bool(spec.get("schedulingGates")),
        workload_ref=_workload_ref(spec),
    )


def _owner(ref: Mapping[str, Any]) -> workloads.OwnerRef:
    return workloads.OwnerRef(
        kind=str(ref.get("kind", "")),
        name=str(ref.get("name", "")),
        controller=bool(ref.get("controller")),
        api_version=str(ref.get("apiVersion", "")),
        uid=str(ref.get("uid", "")),
    )


def _gpus(containers: Iterable[Mapping[str, Any]]) -> int:
    total = 0
    for container in containers:
        resources = container.get("resources") or {}
        wanted = resources.get("limits") or resources.get("requests") or {}
        try:
            total += int(str(wanted.get(GPU_RESOURCE, "0")))
        except ValueError:
            continue
    return total


def _workload_ref(spec: Mapping[str, Any]) -> str | None:
    """The Workload API's gang reference: ``spec.workloadRef`` (Kubernetes 1.35 alpha, name and
    pod group) or ``spec.schedulingGroup.podGroupName`` (1.36+)."""
    ref = spec.get("workloadRef") or {}
    if ref.get("name"):
        group = ref.get("podGroup")
        return f"{ref['name']}/{group}" if group else str(ref["name"])
    group = (spec.get("schedulingGroup") or {}).get("podGroupName")
    return str(group) if group else None


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if not value:
        return None
    return timestamps.parse_utc(str(value))
