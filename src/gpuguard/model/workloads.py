"""A pod as the scheduling-health detectors read it (docs/fleet-health.md): who owns it, which
scheduler places it, whether it is bound and holds GPUs, and since when it waits.

``fleet.Pod`` carries what the isolation decisions need; this carries what grouping pods into
jobs needs (owner references, the gang markers in labels and annotations, the PodScheduled
condition). ``sources.gang_pods`` builds it from Kubernetes Pod JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True, slots=True)
class OwnerRef:
    """One ``metadata.ownerReferences`` entry."""

    kind: str
    name: str
    controller: bool = False
    api_version: str = ""
    uid: str = ""  # kubectl describe finds an object's Events by its uid


@dataclass(frozen=True, slots=True)
class WorkloadPod:
    """One pod, reduced to what grouping it into a job and judging its placement needs.

    ``unschedulable_since`` is the ``lastTransitionTime`` of ``PodScheduled=False`` with reason
    ``Unschedulable`` (None: the scheduler has not given up on it, or it is bound);
    ``gated`` is True while ``spec.schedulingGates`` is not empty (Kueue holds its pods there
    until it admits the workload: such a pod is not waiting for the scheduler).
    """

    namespace: str
    name: str
    node: str | None
    phase: str
    gpu_request: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    owners: tuple[OwnerRef, ...] = ()
    scheduler: str = "default-scheduler"
    created: datetime | None = None
    unschedulable_since: datetime | None = None
    unschedulable_message: str = ""
    gated: bool = False
    workload_ref: str | None = None  # spec.workloadRef.name / spec.schedulingGroup.podGroupName

    @property
    def bound(self) -> bool:
        return bool(self.node)

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def controller(self) -> OwnerRef | None:
        first = self.owners[0] if self.owners else None
        return next((o for o in self.owners if o.controller), first)
