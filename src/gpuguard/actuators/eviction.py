"""Evict one pod through the Eviction API (``pods/eviction`` create), the way ``kubectl
drain`` does: the API server refuses with 429 when a PodDisruptionBudget does not allow the
disruption now, and gpuguard then waits for the next tick; it never deletes a pod itself.
https://kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/
"""

from __future__ import annotations

from enum import StrEnum

from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod

from gpuguard.clients import kube as api_errors
from gpuguard.errors import NotFoundError


class Evicted(StrEnum):
    EVICTED = "evicted"  # the API accepted it: the pod terminates gracefully
    BLOCKED = "blocked"  # 429: a PodDisruptionBudget does not allow it now
    GONE = "gone"  # 404: the pod no longer exists


class Evictor:
    def __init__(self, client: Client) -> None:
        self._client = client

    def evict(self, pod_namespace: str, name: str) -> Evicted:
        """Ask the API to evict the pod; GpuguardError for any other refusal."""
        eviction = Pod.Eviction(metadata=ObjectMeta(name=name, namespace=pod_namespace))
        try:
            with api_errors.translated(f"evicting pod {pod_namespace}/{name}"):
                try:
                    self._client.create(eviction, name, namespace=pod_namespace)
                except ApiError as e:
                    if e.status and e.status.code == 429:
                        return Evicted.BLOCKED
                    raise
        except NotFoundError:
            return Evicted.GONE
        return Evicted.EVICTED
