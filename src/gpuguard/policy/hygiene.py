"""Workload hygiene: settings that decide whether a failed GPU job leaves orphaned CUDA contexts.

The phantom incident's [docs/design.md#incidents] defence layers: a worker blocked in an NCCL
collective ignores SIGTERM; after the grace period the kubelet sends SIGKILL; no cleanup runs and
the GPU can stay phantom-busy. And a RayJob without ``shutdownAfterJobFinishes: true`` keeps its
RayCluster (and GPUs) after the job ends. Read from Kubernetes objects as plain JSON dicts (Pods,
and RayJobs as generic custom resources), one finding per object and problem:

- ``rayjob-keeps-cluster`` — RayJob without ``spec.shutdownAfterJobFinishes: true``;
- ``short-grace-period`` — a GPU pod whose ``terminationGracePeriodSeconds`` (Kubernetes'
  default 30 s when unset) is below ``hygiene.min_grace_period``;
- ``nccl-hang-unbounded`` — a distributed training pod (env ``WORLD_SIZE``/``MASTER_ADDR``,
  or a Kubeflow PyTorchJob label) whose containers set none of
  ``TORCH_NCCL_ASYNC_ERROR_HANDLING``, ``TORCH_NCCL_BLOCKING_WAIT``, ``NCCL_BLOCKING_WAIT``
  (or the legacy ``NCCL_ASYNC_ERROR_HANDLING``) to a non-zero value. A container that takes
  its environment from ``envFrom`` cannot be judged from the pod alone and is not reported.

The seed marks the NCCL direction as unverified; so do the findings' texts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from gpuguard.model import decisions
from gpuguard.model import settings as settings_model

KIND = "hygiene"
Reason = decisions.Reason
GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_GRACE = timedelta(seconds=30)
DISTRIBUTED_ENV = frozenset({"WORLD_SIZE", "MASTER_ADDR"})
PYTORCHJOB_LABELS = frozenset({"training.kubeflow.org/job-name", "pytorch-job-name"})
NCCL_ABORT_ENV = frozenset(
    {
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "TORCH_NCCL_BLOCKING_WAIT",
        "NCCL_BLOCKING_WAIT",
        "NCCL_ASYNC_ERROR_HANDLING",
    }
)

Obj = Mapping[str, Any]


def review(
    pods: Sequence[Obj], rayjobs: Sequence[Obj], settings: settings_model.HygieneSettings
) -> tuple[decisions.Finding, ...]:
    """Every hygiene finding for ``pods`` and ``rayjobs`` (Kubernetes JSON objects)."""
    findings = [f for job in rayjobs if (f := rayjob_finding(job)) is not None]
    for pod in pods:
        findings += pod_findings(pod, settings)
    return tuple(findings)


def rayjob_finding(job: Obj) -> decisions.Finding | None:
    shutdown = (job.get("spec") or {}).get("shutdownAfterJobFinishes")
    if shutdown is True:
        return None
    return decisions.Finding(
        kind=KIND,
        node="",
        reason=Reason.RAYJOB_KEEPS_CLUSTER,
        evidence=(_evidence("RayJob", job, "spec.shutdownAfterJobFinishes", repr(shutdown)),),
        detail=f"RayJob {_name(job)}: its RayCluster keeps the GPUs after the job ends; set "
        "spec.shutdownAfterJobFinishes: true",
    )


def pod_findings(pod: Obj, settings: settings_model.HygieneSettings) -> list[decisions.Finding]:
    if not holds_gpu(pod):
        return []
    found = [_grace_finding(pod, settings.min_grace_period)]
    if is_distributed(pod):
        found.append(_nccl_finding(pod))
    return [f for f in found if f is not None]


def holds_gpu(pod: Obj) -> bool:
    return any(_gpus(c) > 0 for c in _containers(pod))


def is_distributed(pod: Obj) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    env = {name for c in _containers(pod) for name in _env(c)}
    return bool(env & DISTRIBUTED_ENV) or bool(set(labels) & PYTORCHJOB_LABELS)


def _grace_finding(pod: Obj, minimum: timedelta) -> decisions.Finding | None:
    raw = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    grace = DEFAULT_GRACE if raw is None else timedelta(seconds=float(raw))
    if grace >= minimum:
        return None
    shown = f"{grace.total_seconds():g}s" + (" (default)" if raw is None else "")
    return _pod_finding(
        pod,
        Reason.SHORT_GRACE_PERIOD,
        _evidence("Pod", pod, "spec.terminationGracePeriodSeconds", shown),
        f"grace period {shown} < {minimum.total_seconds():g}s: SIGKILL may come before CUDA "
        "cleanup (orphaned contexts, the phantom incident)",
    )


def _nccl_finding(pod: Obj) -> decisions.Finding | None:
    containers = list(_containers(pod))
    if any(c.get("envFrom") for c in containers):
        return None
    set_env = {
        name: value
        for c in containers
        for name, value in _env(c).items()
        if name in NCCL_ABORT_ENV and value not in ("", "0")
    }
    if set_env:
        return None
    return _pod_finding(
        pod,
        Reason.NCCL_HANG_UNBOUNDED,
        _evidence("Pod", pod, "env", "none of " + ", ".join(sorted(NCCL_ABORT_ENV))),
        "distributed training without NCCL async error handling or blocking wait: a hung "
        "collective ignores SIGTERM until SIGKILL (the phantom incident; set "
        "TORCH_NCCL_ASYNC_ERROR_HANDLING and an init_process_group timeout — unverified in the "
        "incident report)",
    )


def _pod_finding(
    pod: Obj, reason: decisions.Reason, evidence: decisions.Evidence, text: str
) -> decisions.Finding:
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    return decisions.Finding(
        kind=KIND,
        node=node,
        reason=reason,
        evidence=(evidence,),
        detail=f"Pod {_name(pod)}: {text}",
    )


def _evidence(kind: str, obj: Obj, field: str, value: str) -> decisions.Evidence:
    return decisions.Evidence(source=f"{kind} {_name(obj)} {field}", value=value)


def _name(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _containers(pod: Obj) -> Iterable[Obj]:
    return (pod.get("spec") or {}).get("containers") or ()


def _gpus(container: Obj) -> float:
    resources = container.get("resources") or {}
    amounts = [(resources.get(k) or {}).get(GPU_RESOURCE, 0) for k in ("limits", "requests")]
    return max(_count(a) for a in amounts)


def _count(amount: Any) -> float:
    """A GPU count ("8", 8); anything else (never valid for nvidia.com/gpu) counts as 0."""
    try:
        return float(amount)
    except (TypeError, ValueError):
        return 0.0


def _env(container: Obj) -> dict[str, str]:
    return {str(e.get("name")): str(e.get("value", "")) for e in container.get("env") or ()}
