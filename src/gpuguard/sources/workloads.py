"""Workload objects for the hygiene review (the phantom incident's [docs/design.md#incidents]
defence layers): GPU pods and Ray's RayJobs, as plain Kubernetes JSON. A cluster without the Ray
operator has no RayJob type: that is "no RayJobs", not an error."""

from __future__ import annotations

from typing import Any

from lightkube import Client
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.core_v1 import Pod

from gpuguard.clients import kube as api_errors
from gpuguard.errors import NotFoundError, SourceError

RayJob = create_namespaced_resource("ray.io", "v1", "RayJob", "rayjobs")


class WorkloadReader:
    def __init__(self, client: Client) -> None:
        self._client = client

    def pods(self, namespace: str | None = None) -> list[dict[str, Any]]:
        with api_errors.translated("listing Pods", SourceError):
            return [p.to_dict() for p in self._client.list(Pod, namespace=namespace or "*")]

    def rayjobs(self, namespace: str | None = None) -> list[dict[str, Any]]:
        try:
            with api_errors.translated("listing RayJobs", SourceError):
                return [dict(j) for j in self._client.list(RayJob, namespace=namespace or "*")]
        except NotFoundError:
            return []  # the Ray operator is not installed: no RayJob type
