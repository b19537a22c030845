"""Events on the workloads the fleet-health detectors report (docs/fleet-health.md): a
Warning Event on the owner of a job stuck in a partial allocation (its Job, MPIJob,
PodGroup...), in the job's namespace, so ``kubectl describe`` of the job shows why its GPUs are
held. The API server requires an Event to live in its object's namespace, which is why this
writer needs ``create`` on events in every namespace (deploy/helm rbac.yaml) — and nothing else:
gpuguard never changes a workload.
"""

from __future__ import annotations

from datetime import datetime

from lightkube import Client
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event

from gpuguard.clients import kube as api_errors
from gpuguard.model import decisions, workloads

COMPONENT = "gpuguard"
BY = "gang"


class WorkloadEvents:
    """Records a Warning Event about one workload object."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def record(
        self, namespace: str, about: workloads.OwnerRef, finding: decisions.Finding, now: datetime
    ) -> None:
        workload_namespace = namespace  # any namespace: the RBAC grant is cluster-wide
        event = workload_event(workload_namespace, about, finding, now)
        where = f"{about.kind} {workload_namespace}/{about.name}"
        with api_errors.translated(f"recording an Event for {where}"):
            self._client.create(event, namespace=workload_namespace)


def workload_event(
    namespace: str, about: workloads.OwnerRef, finding: decisions.Finding, now: datetime
) -> Event:
    """The Event (reason in CamelCase, e.g. ``GangPartialAllocation``), named uniquely."""
    reason = "".join(part.capitalize() for part in str(finding.reason).split("-"))
    return Event(
        metadata=ObjectMeta(name=f"{about.name}.{BY}.{now:%Y%m%d%H%M%S%f}", namespace=namespace),
        involvedObject=ObjectReference(
            kind=about.kind,
            name=about.name,
            namespace=namespace,
            apiVersion=about.api_version or None,
            uid=about.uid or None,
        ),
        reason=reason,
        message=finding.detail[:1024],
        type="Warning",
        source=EventSource(component=COMPONENT),
        firstTimestamp=now,
        lastTimestamp=now,
        count=1,
    )
