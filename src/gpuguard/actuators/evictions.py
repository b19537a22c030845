"""Evicting a pod through the Eviction API (``pods/eviction``), for a change's opt-in drain
window only (docs/change-management.md#draining).

An eviction, unlike a delete, honours the pod's PodDisruptionBudgets and its termination grace
period: the API server answers 429 while evicting it would break a budget ("Cannot evict pod
as it would violate the pod's disruption budget", Kubernetes "API-initiated Eviction"). That
answer is not an error here: the pod keeps running and the rollout waits.
"""

from __future__ import annotations

from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod

from gpuguard.actuators import api_errors
from gpuguard.errors import NotFoundError

TOO_MANY_REQUESTS = 429  # a PodDisruptionBudget refuses the eviction, for now


class Evictions:
    def __init__(self, client: Client) -> None:
        self._client = client

    def evict(self, pod_namespace: str, name: str) -> bool:
        """True when the pod is being evicted (or is gone), False when a budget refuses."""
        eviction = Pod.Eviction(metadata=ObjectMeta(name=name, namespace=pod_namespace))
        try:
            with api_errors.translated(f"evicting Pod {pod_namespace}/{name}"):
                try:
                    self._client.create(eviction, name=name, namespace=pod_namespace)
                except ApiError as e:
                    if e.status is not None and e.status.code == TOO_MANY_REQUESTS:
                        return False
                    raise
        except NotFoundError:
            return True
        return True
