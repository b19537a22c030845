"""Partial-allocation deadlock: a job of several GPU pods with some pods bound and holding
their GPUs while the others wait Pending for the scheduler (docs/fleet-health.md#gang-deadlock).

The default scheduler places pods one by one, so a 16-GPU job can get 8 pods placed and 8
Pending; the placed pods hold their GPUs and block every other job. Gang schedulers (Volcano,
coscheduling, Kueue with ``waitForPodsReady``) are meant to prevent it, and still miss it at
times (kubeflow/trainer#1617: a Volcano MPIJob with worker-0 Running, the launcher and
worker-1 Pending), so the detector runs whatever the scheduler.

1. GPU pods are grouped into jobs by the first marker they carry, in ``MARKERS`` order; a pod
   with none is grouped by its controlling owner (ownerless pods are jobs of one: never a gang).
2. The job's expected size is the one its gang object states (``expected``: PodGroup
   ``minMember``, Workload ``minCount``, a CR's sum of replicas, read by the caller), else
   Kueue's ``pod-group-total-count`` annotation, else the number of its pods.
3. A job is flagged when at least one pod is bound and holds GPUs, at least one pod is
   ``PodScheduled=False/Unschedulable`` for longer than ``grace``, and fewer pods are bound
   than expected. Pods behind ``schedulingGates`` (Kueue not yet admitted) are not waiting for
   the scheduler and are left out; an elastic job at or above its minimum is not flagged.
4. The cost is the GPUs held × the time the first pod has been unschedulable, in GPU-hours.

Read-only: a finding, never an action on a workload. Pure: pods and ``now`` in, findings out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuguard.model import decisions, workloads

KIND = "gang-partial-allocation"
MISSING_KIND = "gang-scheduling-missing"
GANG_SYSTEMS = frozenset({"kubernetes-workload", "volcano", "coscheduling", "kueue"})
DEFAULT_GRACE = timedelta(minutes=10)


@dataclass(frozen=True, slots=True)
class Marker:
    """How one system marks the pods of a job: a label or an annotation, and its system."""

    system: str
    key: str
    where: str  # "label" | "annotation" | "spec"


# In the order the research table lists them (docs/fleet-health.md#markers); first match wins.
MARKERS: tuple[Marker, ...] = (
    Marker("kubernetes-workload", "spec.workloadRef", "spec"),  # 1.35 alpha / 1.36 schedulingGroup
    Marker("volcano", "scheduling.k8s.io/group-name", "annotation"),
    Marker("volcano", "volcano.sh/job-name", "label"),
    Marker("coscheduling", "scheduling.x-k8s.io/pod-group", "label"),
    Marker("kueue", "kueue.x-k8s.io/pod-group-name", "label"),
    Marker("training-operator", "training.kubeflow.org/job-name", "label"),
    Marker("jobset", "jobset.sigs.k8s.io/jobset-name", "label"),
    Marker("kuberay", "ray.io/cluster", "label"),
    Marker("job", "batch.kubernetes.io/job-name", "label"),
    Marker("job", "job-name", "label"),
)
KUEUE_TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"
OWNER = "owner"  # the system of a job grouped by its controlling owner


@dataclass(frozen=True, slots=True)
class JobKey:
    """A job: its namespace, the system that groups it and the group's name."""

    namespace: str
    system: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class GangDeadlock:
    """One job holding GPUs while part of it cannot be placed."""

    job: JobKey
    expected: int
    bound: tuple[workloads.WorkloadPod, ...]
    pending: tuple[workloads.WorkloadPod, ...]
    pending_since: datetime
    now: datetime

    @property
    def gpus_held(self) -> int:
        return sum(p.gpu_request for p in self.bound)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(sorted({p.node for p in self.bound if p.node}))

    @property
    def gpu_hours(self) -> float:
        """GPUs held × how long the first pod has waited, in GPU-hours (lost to everyone)."""
        return self.gpus_held * (self.now - self.pending_since).total_seconds() / 3600

    @property
    def owner(self) -> workloads.OwnerRef | None:
        """The object the job's pods belong to (for an Event people see on it)."""
        return next((p.controller for p in (*self.bound, *self.pending) if p.controller), None)

    @property
    def scheduler(self) -> str:
        return self.pending[0].scheduler

    def finding(self) -> decisions.Finding:
        waited = self.now - self.pending_since
        message = next((p.unschedulable_message for p in self.pending if p.unschedulable_message),
                       "")  # fmt: skip
        detail = (
            f"job {self.job} ({self.job.system}, scheduler {self.scheduler}): "
            f"{len(self.bound)} of {self.expected} pods bound holding {self.gpus_held} GPUs on "
            f"{', '.join(self.nodes)}; {len(self.pending)} Pending for "
            f"{int(waited.total_seconds() // 60)} min; {self.gpu_hours:.1f} GPU-hours held "
            "while the job cannot run. Fix: a gang scheduler (Volcano, coscheduling, Kueue with "
            "waitForPodsReady), or delete the job to free its GPUs"
        )
        evidence: tuple[decisions.Evidence, ...] = (
            decisions.Evidence("gpu-hours held", f"{self.gpu_hours:.2f}", self.now,
                               {"namespace": self.job.namespace, "job": self.job.name}),
            decisions.Evidence("pods bound", ", ".join(p.name for p in self.bound)),
            decisions.Evidence("pods unschedulable", ", ".join(p.name for p in self.pending),
                               self.pending_since),
        )  # fmt: skip
        if message:
            evidence += (decisions.Evidence("scheduler message", message[:300]),)
        return decisions.Finding(
            kind=KIND,
            node=self.nodes[0] if self.nodes else "",
            reason=decisions.Reason.GANG_PARTIAL_ALLOCATION,
            evidence=evidence,
            detail=detail,
        )


def job_of(pod: workloads.WorkloadPod) -> JobKey | None:
    """The job a pod belongs to: its first marker, else its controlling owner, else None."""
    for marker in MARKERS:
        value = _marker_value(pod, marker)
        if value:
            return JobKey(pod.namespace, marker.system, value)
    owner = pod.controller
    if owner is None:
        return None
    return JobKey(pod.namespace, OWNER, f"{owner.kind}/{owner.name}")


def _marker_value(pod: workloads.WorkloadPod, marker: Marker) -> str | None:
    if marker.where == "spec":
        return pod.workload_ref
    source = pod.labels if marker.where == "label" else pod.annotations
    return source.get(marker.key) or None


def detect(
    pods: Iterable[workloads.WorkloadPod],
    now: datetime,
    *,
    grace: timedelta = DEFAULT_GRACE,
    expected: Mapping[JobKey, int] | None = None,
) -> list[GangDeadlock]:
    """Every job holding GPUs while some of its pods have been unschedulable past ``grace``."""
    jobs: dict[JobKey, list[workloads.WorkloadPod]] = defaultdict(list)
    for pod in pods:
        key = job_of(pod)
        if key is not None and pod.gpu_request > 0 and not pod.finished:
            jobs[key].append(pod)
    found = [_judge(key, members, now, grace, (expected or {}).get(key)) for key, members in
             sorted(jobs.items(), key=lambda item: str(item[0]))]  # fmt: skip
    return [d for d in found if d is not None]


def findings(
    pods: Iterable[workloads.WorkloadPod],
    now: datetime,
    *,
    grace: timedelta = DEFAULT_GRACE,
    expected: Mapping[JobKey, int] | None = None,
) -> list[decisions.Finding]:
    """``detect`` as findings (kind ``gang-partial-allocation``)."""
    return [d.finding() for d in detect(pods, now, grace=grace, expected=expected)]


def _judge(
    key: JobKey,
    members: Sequence[workloads.WorkloadPod],
    now: datetime,
    grace: timedelta,
    stated: int | None,
) -> GangDeadlock | None:
    waiting = [p for p in members if not p.gated]
    bound = tuple(p for p in waiting if p.bound)
    pending = tuple(
        p for p in waiting
        if not p.bound and p.unschedulable_since is not None
        and now - p.unschedulable_since >= grace
    )  # fmt: skip
    if not bound or not pending:
        return None
    size = stated or _kueue_total(members) or len(waiting)
    if len(bound) >= size:
        return None  # an elastic job at or above its minimum runs
    since = min(p.unschedulable_since for p in pending if p.unschedulable_since is not None)
    return GangDeadlock(key, size, bound, pending, since, now)


def _kueue_total(members: Sequence[workloads.WorkloadPod]) -> int | None:
    for pod in members:
        text = pod.annotations.get(KUEUE_TOTAL_COUNT, "")
        if text.isdigit() and int(text) > 0:
            return int(text)
    return None


def not_gang_scheduled(pods: Iterable[workloads.WorkloadPod]) -> list[decisions.Finding]:
    """The configuration behind the deadlock (the research notes' GANG-0): a job of several GPU
    pods placed by the default scheduler with no gang marker (no Workload API group, Volcano,
    coscheduling or Kueue), so nothing keeps it from being placed in part. Medium: it deadlocks
    only when the cluster is short of GPUs. One finding per job (``node`` empty)."""
    jobs: dict[JobKey, list[workloads.WorkloadPod]] = defaultdict(list)
    for pod in pods:
        key = job_of(pod)
        if key is not None and pod.gpu_request > 0 and not pod.finished:
            jobs[key].append(pod)
    found = []
    for key, members in sorted(jobs.items(), key=lambda item: str(item[0])):
        default = all(p.scheduler == "default-scheduler" for p in members)
        if len(members) < 2 or key.system in GANG_SYSTEMS or not default:
            continue
        gpus = sum(p.gpu_request for p in members)
        found.append(decisions.Finding(
            kind=MISSING_KIND, node="", reason=decisions.Reason.GANG_SCHEDULING_MISSING,
            evidence=(decisions.Evidence("pods", ", ".join(p.name for p in members[:8])),),
            detail=f"job {key} ({key.system}): {len(members)} GPU pods ({gpus} GPUs) placed pod by "
                   "pod by the default scheduler; use a gang scheduler (Volcano, coscheduling, "
                   "Kueue with waitForPodsReady) so it is never placed in part",
        ))  # fmt: skip
    return found
