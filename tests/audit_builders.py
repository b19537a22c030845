"""Kubernetes objects (as the API returns them, plain JSON) and audit views for the audit
rules' tests; shapes follow https://kubernetes.io/docs/reference/kubernetes-api/."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from gpuguard.model import fleet
from gpuguard.model.audit import AuditView, Input, PromRule, RuleResult
from gpuguard.policy.audit import catalogue, registry
from gpuguard.sources import gang_pods

AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
Obj = dict[str, Any]


def stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def node(
    name: str,
    *,
    gpus: int = 8,
    allocatable: int | None = None,
    cordoned: bool = False,
    cordoned_at: datetime | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    conditions: Mapping[str, str] | None = None,
    kubelet: str = "v1.34.3",
    kernel: str = "6.8.0-60-generic",
    product: str = "NVIDIA-H100-80GB-HBM3",
) -> Obj:
    managed = (
        [{"manager": "kubectl-cordon", "operation": "Update", "time": stamp(cordoned_at),
          "fieldsV1": {"f:spec": {"f:unschedulable": {}}}}]
        if cordoned_at else []
    )
    conds = [{"type": "Ready", "status": "True"}] + [
        {"type": k, "status": v, "reason": f"{k}Reason"} for k, v in (conditions or {}).items()
    ]
    gpu_labels = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": product}
    return {
        "metadata": {"name": name, "labels": gpu_labels | dict(labels or {}),
                     "annotations": dict(annotations or {}), "managedFields": managed},
        "spec": {"unschedulable": True} if cordoned or cordoned_at else {},
        "status": {
            "capacity": {"nvidia.com/gpu": str(gpus)},
            "allocatable": {"nvidia.com/gpu": str(gpus if allocatable is None else allocatable)},
            "conditions": conds,
            "nodeInfo": {"kubeletVersion": kubelet, "kernelVersion": kernel},
        },
    }


def pod(
    name: str,
    *,
    namespace: str = "ml",
    node_name: str | None = "gpu-1",
    gpus: int = 8,
    image: str = "trainer:1",
    env: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    owner: str | None = None,
    phase: str = "Running",
    ready: bool = True,
    extra_spec: Mapping[str, Any] | None = None,
    status: Mapping[str, Any] | None = None,
) -> Obj:
    container: Obj = {"name": "main", "image": image,
                      "env": [{"name": k, "value": v} for k, v in (env or {}).items()]}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    meta: Obj = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": f"{name}-owner"}]
    spec: Obj = {"containers": [container]} | dict(extra_spec or {})
    if node_name:
        spec["nodeName"] = node_name
    ready_flag = "True" if ready else "False"
    return {"metadata": meta, "spec": spec,
            "status": dict(status or {"phase": phase,
                                      "conditions": [{"type": "Ready", "status": ready_flag}]})}


def system_pod(name: str, node_name: str, image: str, *, namespace: str = "gpu-operator",
               env: Mapping[str, str] | None = None, ready: bool = True) -> Obj:
    return pod(name, namespace=namespace, node_name=node_name, gpus=0, image=image, env=env,
               owner="DaemonSet", ready=ready)


def view(
    objects: Mapping[Input, list[Obj]] | None = None,
    *,
    version: str | None = "v1.34.3+rke2r1",
    rules: tuple[PromRule, ...] = (),
    series: frozenset[str] = frozenset(),
    prom_nodes: Mapping[Input, frozenset[str]] | None = None,
    missing: Mapping[Input, str] | None = None,
    health_samples: tuple[fleet.MetricSample, ...] = (),
    pod_gpus: Mapping[str, Mapping[str, tuple[int, ...]]] | None = None,
) -> AuditView:
    pods = (gang_pods.workload_pod(p) for p in (objects or {}).get(Input.PODS, []))
    return AuditView(
        at=AT,
        objects={k: tuple(v) for k, v in (objects or {}).items()},
        api_server_version=version,
        prom_rules=rules,
        prom_series=series,
        prom_nodes=dict(prom_nodes or {}),
        missing=dict(missing or {}),
        workload_pods=tuple(p for p in pods if not p.finished),
        health_samples=health_samples,
        pod_gpus=dict(pod_gpus or {}),
    )


def run_rule(rule_id: str, audit_view: AuditView) -> RuleResult:
    """The result of the catalogue's rule ``rule_id`` on ``audit_view``."""
    rule = next(r for r in catalogue.RULES if r.id == rule_id)
    return registry.run_one(audit_view, rule)
