"""The simulator's kube-state-metrics: the API server's Nodes and Pods rendered as /metrics.

It must look like the real ksm where gpuguard reads it
(tests/data/reference/kube_state_metrics_sample.txt): the sanitised
``resource="nvidia_com_gpu",unit="integer"``, one series per condition status, node
annotations only for the allow-listed ``gpuguard.io/`` prefix. Rendering is pure: (store, now)
in, families out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from gpuguard.model import metric_names as mn
from gpuguard.sim import exposition, store

NODE_KIND = "Node"  # the store's kind names (sim.apiresources)
POD_KIND = "Pod"

_PHASES = ("Pending", "Succeeded", "Failed", "Unknown", "Running")
_CONDITION_STATUSES = ("true", "false", "unknown")
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)([a-zA-Z]*)$")
_QUANTITY_SUFFIX = {
    "": 1.0, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
    "P": 1e15, "E": 1e18, "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40,
    "Pi": 2.0**50, "Ei": 2.0**60,
}  # fmt: skip
_HELP = {
    mn.KSM_NODE_INFO: "[STABLE] Information about a cluster node.",
    mn.KSM_NODE_UNSCHEDULABLE: "[STABLE] Whether a node can schedule new pods.",
    mn.KSM_NODE_ALLOCATABLE: "[STABLE] The allocatable for different resources of a node that "
    "are available for scheduling.",
    mn.KSM_NODE_CAPACITY: "[STABLE] The capacity for different resources of a node.",
    mn.KSM_NODE_CONDITION: "[STABLE] The condition of a cluster node.",
    mn.KSM_NODE_TAINT: "[STABLE] The taint of a cluster node.",
    mn.KSM_NODE_ANNOTATIONS: "Kubernetes annotations converted to Prometheus labels.",
    mn.KSM_POD_INFO: "[STABLE] Information about pod.",
    mn.KSM_POD_PHASE: "[STABLE] The pods current phase.",
    mn.KSM_POD_READY: "[STABLE] Describes whether the pod is ready to serve requests.",
    mn.KSM_POD_REQUESTS: "The number of requested request resource by a container. It is "
    "recommended to use the kube_pod_resource_requests metric exposed by kube-scheduler "
    "instead, as it is more precise.",
    mn.KSM_CONTAINER_RESTARTS: "[STABLE] The number of container restarts per container.",
    mn.KSM_CONTAINER_WAITING_REASON: "[STABLE] Describes the reason the container is currently "
    "in waiting state.",
}
# Annotations exported as kube_node_annotations labels, as with ksm's
# --metric-annotations-allowlist=nodes=[gpuguard.io/...] (prefixes).
ANNOTATION_ALLOWLIST = ("gpuguard.io/",)

Obj = dict[str, Any]
_Rows = Callable[[Obj], Iterable[tuple[exposition.Labels, float]]]


def parse_quantity(text: str) -> float:
    """A Kubernetes resource quantity ("8", "500m", "64Gi", "1e3") as a float."""
    match = _QUANTITY.match(str(text).strip())
    if match is None or match[2] not in _QUANTITY_SUFFIX:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    return float(match[1]) * _QUANTITY_SUFFIX[match[2]]


def sanitize(name: str) -> str:
    """ksm's label-value/name sanitising: every character outside [a-zA-Z0-9_] becomes _."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def resource_unit(resource: str) -> str:
    if resource == "cpu":
        return "core"
    if resource in ("memory", "ephemeral-storage", "storage") or resource.startswith("hugepages-"):
        return "byte"
    return "integer"


def ksm_families(objects: store.ObjectStore, now: datetime) -> list[exposition.Family]:
    """kube-state-metrics' node and pod families for the store's objects at ``now``."""
    del now  # ksm reports current object state; the argument keeps every exporter alike
    nodes = objects.list(NODE_KIND)
    pods = objects.list(POD_KIND)
    families = [_node_family(name, rows, nodes) for name, rows in _NODE_ROWS]
    families += [_pod_family(name, rows, pods) for name, rows in _POD_ROWS]
    return [f for f in families if f.samples]


def render_ksm(objects: store.ObjectStore, now: datetime) -> str:
    """kube-state-metrics' /metrics body (Prometheus text format 0.0.4) at ``now``."""
    return exposition.to_text(ksm_families(objects, now))


def _name(obj: Obj) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


def _node_family(name: str, rows: _Rows, nodes: Sequence[Obj]) -> exposition.Family:
    samples = [
        exposition.Sample((("node", _name(n)), *labels), value)
        for n in nodes
        for labels, value in rows(n)
    ]
    return exposition.Family(name, "gauge", _HELP[name], tuple(samples))


def _node_info(node: Obj) -> Iterable[tuple[exposition.Labels, float]]:
    info = node.get("status", {}).get("nodeInfo", {})
    spec = node.get("spec", {})
    ip = next((a.get("address", "") for a in node.get("status", {}).get("addresses", [])
               if a.get("type") == "InternalIP"), "")  # fmt: skip
    yield (
        (
            ("container_runtime_version", str(info.get("containerRuntimeVersion", ""))),
            ("kernel_version", str(info.get("kernelVersion", ""))),
            ("kubelet_version", str(info.get("kubeletVersion", ""))),
            ("kubeproxy_version", "deprecated"),
            ("os_image", str(info.get("osImage", ""))),
            ("pod_cidr", str(spec.get("podCIDR", ""))),
            ("provider_id", str(spec.get("providerID", ""))),
            ("internal_ip", str(ip)),
            ("system_uuid", str(info.get("systemUUID", ""))),
        ),
        1,
    )


def _node_unschedulable(node: Obj) -> Iterable[tuple[exposition.Labels, float]]:
    yield (), 1 if node.get("spec", {}).get("unschedulable") else 0


def _node_resources(key: str) -> _Rows:
    def rows(node: Obj) -> Iterable[tuple[exposition.Labels, float]]:
        for resource, qty in sorted((node.get("status", {}).get(key) or {}).items()):
            labels = (("resource", sanitize(resource)), ("unit", resource_unit(resource)))
            yield labels, parse_quantity(qty)

    return rows


def _node_conditions(node: Obj) -> Iterable[tuple[exposition.Labels, float]]:
    for cond in node.get("status", {}).get("conditions", []):
        have = str(cond.get("status", "Unknown")).lower()
        for status in _CONDITION_STATUSES:
            yield (
                (("condition", str(cond.get("type", ""))), ("status", status)),
                int(have == status),
            )


def _node_taints(node: Obj) -> Iterable[tuple[exposition.Labels, float]]:
    for taint in node.get("spec", {}).get("taints") or []:
        yield (
            (
                ("key", str(taint.get("key", ""))),
                ("value", str(taint.get("value", ""))),
                ("effect", str(taint.get("effect", ""))),
            ),
            1,
        )


def _node_annotations(node: Obj) -> Iterable[tuple[exposition.Labels, float]]:
    annotations = node.get("metadata", {}).get("annotations") or {}
    kept = sorted(
        (mn.ksm_annotation_label(k), str(v))
        for k, v in annotations.items()
        if k.startswith(ANNOTATION_ALLOWLIST)
    )
    yield tuple(kept), 1


_NODE_ROWS: tuple[tuple[str, _Rows], ...] = (
    (mn.KSM_NODE_ANNOTATIONS, _node_annotations),
    (mn.KSM_NODE_INFO, _node_info),
    (mn.KSM_NODE_TAINT, _node_taints),
    (mn.KSM_NODE_UNSCHEDULABLE, _node_unschedulable),
    (mn.KSM_NODE_ALLOCATABLE, _node_resources("allocatable")),
    (mn.KSM_NODE_CAPACITY, _node_resources("capacity")),
    (mn.KSM_NODE_CONDITION, _node_conditions),
)


def _pod_family(name: str, rows: _Rows, pods: Sequence[Obj]) -> exposition.Family:
    samples = [
        exposition.Sample((*_pod_id(p), *labels), value) for p in pods for labels, value in rows(p)
    ]
    kind = "counter" if name == mn.KSM_CONTAINER_RESTARTS else "gauge"
    return exposition.Family(name, kind, _HELP[name], tuple(samples))


def _pod_id(pod: Obj) -> exposition.Labels:
    meta = pod.get("metadata", {})
    return (
        ("namespace", str(meta.get("namespace", ""))),
        ("pod", str(meta.get("name", ""))),
        ("uid", str(meta.get("uid", ""))),
    )


def _pod_info(pod: Obj) -> Iterable[tuple[exposition.Labels, float]]:
    spec, status = pod.get("spec", {}), pod.get("status", {})
    owners = pod.get("metadata", {}).get("ownerReferences") or [{}]
    yield (
        (
            ("host_ip", str(status.get("hostIP", ""))),
            ("pod_ip", str(status.get("podIP", ""))),
            ("node", str(spec.get("nodeName", ""))),
            ("created_by_kind", str(owners[0].get("kind", "<none>"))),
            ("created_by_name", str(owners[0].get("name", "<none>"))),
            ("priority_class", str(spec.get("priorityClassName", ""))),
            ("host_network", "true" if spec.get("hostNetwork") else "false"),
        ),
        1,
    )


def _pod_phase(pod: Obj) -> Iterable[tuple[exposition.Labels, float]]:
    phase = pod.get("status", {}).get("phase")
    if phase:
        for p in _PHASES:
            yield (("phase", p),), int(p == phase)


def _pod_ready(pod: Obj) -> Iterable[tuple[exposition.Labels, float]]:
    for cond in pod.get("status", {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            have = str(cond.get("status", "Unknown")).lower()
            for status in _CONDITION_STATUSES:
                yield (("condition", status),), int(have == status)


def _pod_requests(pod: Obj) -> Iterable[tuple[exposition.Labels, float]]:
    node = str(pod.get("spec", {}).get("nodeName", ""))
    for c in pod.get("spec", {}).get("containers", []):
        for resource, qty in sorted((c.get("resources", {}).get("requests") or {}).items()):
            yield (
                (
                    ("container", str(c.get("name", ""))),
                    ("node", node),
                    ("resource", sanitize(resource)),
                    ("unit", resource_unit(resource)),
                ),
                parse_quantity(qty),
            )


def _container_restarts(pod: Obj) -> Iterable[tuple[exposition.Labels, float]]:
    for cs in pod.get("status", {}).get("containerStatuses") or []:
        yield (("container", str(cs.get("name", ""))),), float(cs.get("restartCount", 0))


def _container_waiting(pod: Obj) -> Iterable[tuple[exposition.Labels, float]]:
    for cs in pod.get("status", {}).get("containerStatuses") or []:
        reason = (cs.get("state", {}).get("waiting") or {}).get("reason")
        if reason:
            yield (("container", str(cs.get("name", ""))), ("reason", str(reason))), 1


_POD_ROWS: tuple[tuple[str, _Rows], ...] = (
    (mn.KSM_POD_INFO, _pod_info),
    (mn.KSM_POD_PHASE, _pod_phase),
    (mn.KSM_POD_READY, _pod_ready),
    (mn.KSM_POD_REQUESTS, _pod_requests),
    (mn.KSM_CONTAINER_RESTARTS, _container_restarts),
    (mn.KSM_CONTAINER_WAITING_REASON, _container_waiting),
)
