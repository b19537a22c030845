"""Workload rules: GPU pods that tolerate a cordon, bypass the scheduler, die before CUDA
cleanup, hang in NCCL, keep a finished RayJob's GPUs, have no priority, are protected by a PDB
that blocks every drain."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from gpuguard.model.audit import AuditView, Input, Obj, Severity
from gpuguard.model.decisions import Reason
from gpuguard.policy import hygiene
from gpuguard.policy.audit import kube
from gpuguard.policy.audit.registry import Hit

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
_TRAINING_OWNERS = frozenset({"Job", "PyTorchJob", "MPIJob", "JobSet", "TrainJob"})


# TOL-1 ------------------------------------------------------------------------------------


def tolerates_cordon(view: AuditView) -> Iterator[Hit]:
    for pod in kube.gpu_pods(view):
        if kube.owner_kind(pod) == "DaemonSet":
            continue
        for toleration in kube.spec(pod).get("tolerations") or []:
            if _tolerates_cordon(toleration):
                severity = (Severity.HIGH if kube.owner_kind(pod) in _TRAINING_OWNERS
                            else Severity.MEDIUM)
                yield Hit(severity, (kube.ref("Pod", pod),),
                          f"toleration {dict(toleration)} tolerates {UNSCHEDULABLE_TAINT}: the "
                          f"pod can land on a cordoned node (on {kube.node_of(pod)})")
                break


def _tolerates_cordon(toleration: Mapping[str, Any]) -> bool:
    key = toleration.get("key")
    everything = toleration.get("operator") == "Exists" and not key
    return everything or key == UNSCHEDULABLE_TAINT


# PIN-1 ------------------------------------------------------------------------------------


def pinned_templates(view: AuditView) -> Iterator[Hit]:
    cordoned = {kube.name(n) for n in view.of(Input.NODES) if kube.cordoned(n)}
    for kind, objects in (("Job", view.of(Input.JOBS)), ("Deployment",
                                                         view.of(Input.DEPLOYMENTS))):
        for obj in objects:
            template = kube.spec(kube.spec(obj).get("template") or {})
            pinned = template.get("nodeName")
            if not pinned or kube.gpu_request({"spec": template}) == 0:
                continue
            severity = Severity.HIGH if pinned in cordoned else Severity.MEDIUM
            state = " (cordoned)" if pinned in cordoned else ""
            yield Hit(severity, (kube.ref(kind, obj),),
                      f"template spec.nodeName={pinned}{state}: its GPU pods bypass the "
                      "scheduler and the cordon")


# TGP-1, NCCL-1, RAY-1: the hygiene review's checks (policy.hygiene), as audit rules ------


def short_grace(view: AuditView) -> Iterator[Hit]:
    """One finding per namespace listing its pods: a grace period is usually a team's template
    default, so one fix per namespace, not one line per replica."""
    grace = {kube.ref("Pod", pod): found.evidence[0].value for pod in kube.gpu_pods(view)
             for found in hygiene.pod_findings(pod, view.hygiene)
             if found.reason is Reason.SHORT_GRACE_PERIOD}
    short = (p for p in kube.gpu_pods(view) if kube.ref("Pod", p) in grace)
    minimum = f"{view.hygiene.min_grace_period.total_seconds():g}s"
    for namespace, pods in _per_namespace(short).items():
        listed = ", ".join(f"{kube.name(p)} ({grace[kube.ref('Pod', p)]})" for p in pods)
        yield Hit(Severity.LOW, (f"Namespace/{namespace}",),
                  f"{len(pods)} GPU pod(s) with a grace period under {minimum}: {listed}; "
                  "SIGKILL may come before CUDA cleanup (orphaned contexts)")


def nccl_unbounded(view: AuditView) -> Iterator[Hit]:
    yield from _hygiene(view, Reason.NCCL_HANG_UNBOUNDED, Severity.MEDIUM)


def _hygiene(view: AuditView, reason: Reason, severity: Severity) -> Iterator[Hit]:
    for pod in kube.gpu_pods(view):
        for found in hygiene.pod_findings(pod, view.hygiene):
            if found.reason is reason:
                yield Hit(severity, (kube.ref("Pod", pod),), found.detail)


def rayjob_keeps_cluster(view: AuditView) -> Iterator[Hit]:
    for job in view.of(Input.RAYJOBS):
        found = hygiene.rayjob_finding(job)
        if found is not None:
            yield Hit(Severity.MEDIUM, (kube.ref("RayJob", job),), found.detail)


# PRIO-1 -----------------------------------------------------------------------------------


def no_priority(view: AuditView) -> Iterator[Hit]:
    unprioritised = (p for p in kube.gpu_pods(view) if not kube.spec(p).get("priorityClassName"))
    for namespace, pods in _per_namespace(unprioritised).items():
        names = [kube.name(p) for p in pods]
        yield Hit(Severity.LOW, (f"Namespace/{namespace}",),
                  f"{len(names)} GPU pod(s) without priorityClassName ({', '.join(names[:5])}): "
                  "nothing decides which job gives way when GPUs run short")


def _per_namespace(pods: Iterable[Obj]) -> dict[str, list[Obj]]:
    """Pods grouped by namespace, namespaces sorted."""
    grouped: dict[str, list[Obj]] = defaultdict(list)
    for pod in pods:
        grouped[str(kube.meta(pod).get("namespace") or "")].append(pod)
    return dict(sorted(grouped.items()))


# PDB-1 ------------------------------------------------------------------------------------


def blocking_pdbs(view: AuditView) -> Iterator[Hit]:
    pods = list(kube.gpu_pods(view))
    for pdb in view.of(Input.PDBS):
        if kube.status(pdb).get("disruptionsAllowed") != 0:
            continue
        namespace = kube.meta(pdb).get("namespace")
        selector = kube.spec(pdb).get("selector") or {}
        held = [kube.name(p) for p in pods
                if kube.meta(p).get("namespace") == namespace and selects(selector, p)]
        if held:
            yield Hit(Severity.MEDIUM, (kube.ref("PodDisruptionBudget", pdb),),
                      f"disruptionsAllowed=0 over GPU pods {', '.join(held[:5])}: drains, "
                      "driver upgrades and node repair wait forever")


def selects(selector: Mapping[str, Any], pod: Obj) -> bool:
    """A label selector (matchLabels and matchExpressions) against the pod's labels; an empty
    selector selects every pod in a PDB's namespace (policy/v1)."""
    have = kube.labels(pod)
    if any(have.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(_expression(e, have) for e in selector.get("matchExpressions") or [])


def _expression(expr: Mapping[str, Any], have: Mapping[str, str]) -> bool:
    key, values = expr.get("key", ""), set(expr.get("values") or [])
    match expr.get("operator"):
        case "In":
            return have.get(key) in values
        case "NotIn":
            return have.get(key) not in values
        case "Exists":
            return key in have
        case "DoesNotExist":
            return key not in have
    return False
