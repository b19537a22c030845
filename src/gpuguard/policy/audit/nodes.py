"""Node and version hygiene rules: long or unexplained cordons, kubelet skew, GPU nodes still
schedulable with a GPU fault condition, no spare nodes, driver/kernel drift in a pool, GPU
Operator upgrades that cannot progress, and gpuguard's own pending (withheld) faults."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from typing import Any

from gpuguard.model import annotation_keys, fleet, gpu_isolation, node_conditions
from gpuguard.model.audit import AuditView, Input, Obj, Severity
from gpuguard.policy.audit import kube
from gpuguard.policy.audit.registry import Hit, NotChecked

CORDON_MAX_AGE = timedelta(hours=72)
SPARE_MIN_FRACTION = 0.10  # Imbue keeps 10-20 % more machines than training needs
MAX_KUBELET_MINORS_BEHIND = 3  # https://kubernetes.io/releases/version-skew-policy/#kubelet
AKS_GPU_CONDITIONS = (
    "GPUMissing", "NVLinkStatusInactive", "XIDErrors", "IBLinkFlapping",
    "UnhealthyNvidiaDevicePlugin",
)  # fmt: skip
DRIVER_LABEL = "nvidia.com/cuda.driver-version.full"
UPGRADE_STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
_SILENCING = re.compile(r"\b(unless|and|on)\b.*kube_node_spec_unschedulable", re.DOTALL)


# CORDON-1 ---------------------------------------------------------------------------------


def cordon(view: AuditView) -> Iterator[Hit]:
    long_cordoned = view.prom_nodes.get(Input.PROM_CORDON_72H, frozenset())
    silencing = sorted({r.name for r in view.prom_rules if _SILENCING.search(r.expr)})
    for node in view.of(Input.NODES):
        if not kube.cordoned(node):
            continue
        since = cordoned_since(node)
        too_old = (since is not None and view.at - since > CORDON_MAX_AGE) or (
            kube.name(node) in long_cordoned
        )
        reason = _cordon_reason(node)
        if reason and not too_old:
            continue
        yield Hit(Severity.MEDIUM, (kube.ref("Node", node),),
                  _cordon_evidence(node, view.at, since, reason, silencing))


def cordoned_since(node: Obj) -> datetime | None:
    """When ``spec.unschedulable`` was last written: the ``managedFields`` entry that owns it
    (the unschedulable taint has no ``timeAdded``; it is written only for NoExecute taints,
    https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/node-v1/)."""
    for entry in kube.meta(node).get("managedFields") or []:
        if "f:unschedulable" in ((entry.get("fieldsV1") or {}).get("f:spec") or {}):
            return kube.time_of(entry.get("time"))
    return None


def _cordon_reason(node: Obj) -> str:
    notes = kube.notes(node)
    if annotation_keys.ISOLATED_AT in notes:
        return f"gpuguard isolation ({notes.get(annotation_keys.REASON, 'no reason recorded')})"
    keyed = sorted(k for k in notes if "reason" in k.lower() or k == annotation_keys.HOLD)
    return ", ".join(f"{k}={notes[k]}" for k in keyed)


def _cordon_evidence(
    node: Obj, at: datetime, since: datetime | None, reason: str, silencing: list[str]
) -> str:
    age = f"cordoned {_days(at - since)} (since {since:%Y-%m-%d %H:%M}Z)" if since else (
        "cordoned (since when unknown: no managedFields time for spec.unschedulable)"
    )
    why = f"reason: {reason}" if reason else "no reason annotation"
    idle = f"{kube.gpu_allocatable(node)} allocatable GPUs idle"
    text = f"{age}; {why}; {idle}"
    if silencing:
        text += "; alert rules that skip cordoned nodes (silenced here): " + ", ".join(silencing)
    return text


def _days(delta: timedelta) -> str:
    return f"{delta.total_seconds() / 86400:.1f} days"


# SKEW-1 -----------------------------------------------------------------------------------


def kubelet_skew(view: AuditView) -> Iterable[Hit] | NotChecked:
    server = kube.version(view.api_server_version or "")
    if server is None:
        return NotChecked(f"API server version unreadable: {view.api_server_version!r}")
    return [
        Hit(Severity.HIGH, (kube.ref("Node", n),), f"kubelet {shown}, API server "
            f"{view.api_server_version}: {problem}")
        for n in view.of(Input.NODES)
        if (shown := str((kube.status(n).get("nodeInfo") or {}).get("kubeletVersion", "")))
        and (problem := skew_problem(kube.version(shown), server))
    ]


def skew_problem(
    component: tuple[int, int, int] | None, server: tuple[int, int, int]
) -> str | None:
    """Why a node component's version breaks the skew policy against the API server."""
    if component is None:
        return None
    if component[:2] > server[:2]:
        return "newer than the API server (the kubelet must not be newer)"
    if component[0] != server[0] or server[1] - component[1] > MAX_KUBELET_MINORS_BEHIND:
        return f"more than {MAX_KUBELET_MINORS_BEHIND} minor versions older than the API server"
    return None


# COND-1 -----------------------------------------------------------------------------------


def fault_condition_schedulable(view: AuditView) -> Iterator[Hit]:
    for node in kube.gpu_nodes(view):
        if kube.cordoned(node):
            continue
        bad = [c for c in AKS_GPU_CONDITIONS if (kube.condition(node, c) or {}).get("status")
               == "True"]
        missing = unexplained_missing(node)
        if not bad and not missing:
            continue
        facts = [f"condition {c}=True" for c in bad]
        if missing:
            facts.append(f"{missing} GPU(s) missing: capacity {kube.gpu_capacity(node)} > "
                         f"allocatable {kube.gpu_allocatable(node)}")
        yield Hit(Severity.HIGH, (kube.ref("Node", node),),
                  "; ".join(facts) + "; the node is still schedulable")


# COND-2 -----------------------------------------------------------------------------------


def malformed_condition_times(view: AuditView) -> Iterator[Hit]:
    """A node whose conditions carry a time that is not one: each named, with its text (the
    readers that parse conditions whole fail on the node; gpuguard reads the time as unknown,
    so a GPU condition's fault time is lost)."""
    for node in view.of(Input.NODES):
        bad = node_conditions.malformed_times(kube.status(node).get("conditions"))
        if bad:
            yield Hit(Severity.MEDIUM, (kube.ref("Node", node),),
                      "condition time not an RFC 3339 time: " + "; ".join(bad))


def unexplained_missing(node: Obj) -> int:
    """GPUs the device plugin no longer offers, less those gpuguard took out on purpose."""
    return gpu_isolation.unexplained_missing(as_fleet_node(node))


def as_fleet_node(node: Obj) -> fleet.Node:
    """The few fields gpuguard's own mark readers use (``model.withheld``, ``gpu_isolation``)."""
    return fleet.Node(
        name=kube.name(node), boot_id="", gpu_capacity=kube.gpu_capacity(node),
        gpu_allocatable=kube.gpu_allocatable(node), unschedulable=kube.cordoned(node),
        annotations=dict(kube.notes(node)), labels=dict(kube.labels(node)),
    )


# SPARE-1 ----------------------------------------------------------------------------------


def spare_capacity(view: AuditView) -> Iterator[Hit]:
    busy = {kube.node_of(p) for p in kube.gpu_pods(view)}
    for product, nodes in sorted(pools(view).items()):
        free = [n for n in nodes if kube.is_ready(n) and not kube.cordoned(n)
                and kube.name(n) not in busy]
        needed = math.ceil(len(nodes) * SPARE_MIN_FRACTION)
        if len(free) < needed:
            yield Hit(Severity.INFO, (f"pool/{product}",),
                      f"{len(free)} of {len(nodes)} {product} nodes free and schedulable "
                      f"(< {SPARE_MIN_FRACTION:.0%}): a job that loses a node has nowhere "
                      "to restart")


def pools(view: AuditView) -> dict[str, list[Obj]]:
    """GPU nodes by GPU model (GPU feature discovery's ``nvidia.com/gpu.product``)."""
    by_product: dict[str, list[Obj]] = defaultdict(list)
    for node in kube.gpu_nodes(view):
        by_product[kube.labels(node).get(kube.PRODUCT_LABEL, "unknown")].append(node)
    return by_product


# UPG-1 ------------------------------------------------------------------------------------

_STACK = ("device-plugin", "gpu-feature-discovery", "dcgm-exporter")
_RESTARTS = 5
_MISMATCH = "Driver/library version mismatch"


def version_drift(view: AuditView) -> Iterator[Hit]:
    for product, nodes in sorted(pools(view).items()):
        for what, values in (("driver", _spread(nodes, _driver)),
                             ("kernel", _spread(nodes, _kernel))):
            if len(values) > 1:
                shown = "; ".join(f"{v}: {', '.join(sorted(ns))}" for v, ns in values.items())
                yield Hit(Severity.MEDIUM, (f"pool/{product}",),
                          f"{len(values)} {what} versions in one pool ({shown})")
    for pod in kube.pods_named(view, *_STACK):
        restarts = sum(int(c.get("restartCount") or 0)
                       for c in kube.status(pod).get("containerStatuses") or [])
        said = str(kube.status(pod).get("message") or "")
        if restarts >= _RESTARTS or _MISMATCH in said:
            yield Hit(Severity.MEDIUM, (kube.ref("Pod", pod),),
                      f"{restarts} restarts{'; ' + said if said else ''} on node "
                      f"{kube.node_of(pod)}")


def _driver(node: Obj) -> str:
    return kube.labels(node).get(DRIVER_LABEL, "")


def _kernel(node: Obj) -> str:
    return str((kube.status(node).get("nodeInfo") or {}).get("kernelVersion") or "")


def _spread(nodes: list[Obj], key: Any) -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for node in nodes:
        if value := key(node):
            found[value].append(kube.name(node))
    return found


# GPUOP-1 ----------------------------------------------------------------------------------


def gpu_operator_upgrades(view: AuditView) -> Iterable[Hit] | NotChecked:
    hits = [
        Hit(Severity.MEDIUM, (kube.ref("Node", n),), f"{UPGRADE_STATE_LABEL}=upgrade-failed")
        for n in view.of(Input.NODES)
        if kube.labels(n).get(UPGRADE_STATE_LABEL) == "upgrade-failed"
    ]
    policies = view.of(Input.CLUSTER_POLICIES)
    if not policies:
        return hits or NotChecked("no GPU Operator ClusterPolicy in the cluster")
    gpu = kube.gpu_nodes(view)
    cordoned = [kube.name(n) for n in gpu if kube.cordoned(n)]
    by_gpuguard = [kube.name(n) for n in gpu if kube.cordoned(n) and _gpuguards_cordon(n)]
    for policy in policies:
        driver = kube.spec(policy).get("driver") or {}
        if driver.get("enabled") is False:
            hits.append(Hit(Severity.INFO, (kube.ref("ClusterPolicy", policy),),
                            "driver.enabled=false: host drivers are not managed or upgraded "
                            "by the GPU Operator"))
            continue
        limit = max_unavailable((driver.get("upgradePolicy") or {}).get("maxUnavailable"),
                                len(gpu))
        if cordoned and len(cordoned) >= limit:
            hits.append(Hit(Severity.MEDIUM, (kube.ref("ClusterPolicy", policy),),
                            f"{len(cordoned)} GPU nodes cordoned ({', '.join(cordoned[:5])}) >= "
                            f"driver.upgradePolicy.maxUnavailable = {limit}: a driver upgrade "
                            f"does not progress ({len(by_gpuguard)} of them cordoned by gpuguard:"
                            " a fault isolation or a change)"))
    return hits


def _gpuguards_cordon(node: Obj) -> bool:
    """gpuguard cordoned it: a fault isolation (isolated-at) or a change in progress."""
    marks = kube.notes(node)
    return annotation_keys.ISOLATED_AT in marks or annotation_keys.CHANGE in marks


def max_unavailable(value: object, nodes: int) -> int:
    """``maxUnavailable`` as a node count: an int, or a percentage of ``nodes`` rounded up
    (the GPU Operator's default is 25 %)."""
    text = str(value if value is not None else "25%")
    if text.endswith("%"):
        return max(1, math.ceil(nodes * float(text[:-1]) / 100))
    return max(1, int(text)) if text.isdigit() else 1


# REPAIR-1 ---------------------------------------------------------------------------------

REPAIR_CONDITION = "AcceleratedHardwareReady"
CHURN_WINDOW = timedelta(hours=1)
CHURN_MIN = 3


def node_repair(view: AuditView) -> Iterable[Hit] | NotChecked:
    karpenter = [d for d in view.of(Input.DEPLOYMENTS) if "karpenter" in kube.name(d)]
    repair_on = [d for d in karpenter if _node_repair_gate(d)]
    if not repair_on:
        return []  # no Karpenter, or node repair off: nothing replaces GPU nodes
    hits = [
        Hit(Severity.HIGH, (kube.ref("Node", n),),
            f"{REPAIR_CONDITION}=False ({found.get('reason')}) with Karpenter NodeRepair=true: "
            "the node is replaced after 10 min")
        for n in kube.gpu_nodes(view)
        if (found := kube.condition(n, REPAIR_CONDITION) or {}).get("status") == "False"
    ]
    young = [c for c in view.of(Input.NODECLAIMS)
             if (t := kube.time_of(kube.meta(c).get("creationTimestamp")))
             and view.at - t < CHURN_WINDOW]
    if len(young) >= CHURN_MIN:
        hits.append(Hit(Severity.HIGH, tuple(kube.ref("NodeClaim", c) for c in young[:5]),
                        f"{len(young)} NodeClaims created in the last hour with NodeRepair=true: "
                        "nodes are being replaced in a loop"))
    return hits


def _node_repair_gate(deployment: Obj) -> bool:
    template = kube.spec(kube.spec(deployment).get("template") or {})
    return any("NodeRepair=true" in kube.env(c).get("FEATURE_GATES", "")
               for c in template.get("containers") or [])


# GG-1 -------------------------------------------------------------------------------------


def withheld_faults(view: AuditView) -> Iterator[Hit]:
    for node in view.of(Input.NODES):
        mark = as_fleet_node(node).marks.withheld
        if mark is not None:
            yield Hit(Severity.HIGH, (kube.ref("Node", node),),
                      f"fault {mark.fault} withheld by the breaker ({mark.reason}) since "
                      f"{mark.since:%Y-%m-%d %H:%M}Z: the node still serves with it")
