"""The DRA route's API calls: read the ResourceSlices, and create, update or delete
gpuguard's ``DeviceTaintRule`` objects (``resource.k8s.io/v1``, Kubernetes 1.37+;
https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/
#device-taints-and-tolerations). Whether the cluster serves the API is found by listing the
rules: a 404 means it does not (older cluster, or the beta API of 1.36 only — for that one
``gpuguard gpu-isolate taint-rule --api-version resource.k8s.io/v1beta2`` prints the rule).
"""

from __future__ import annotations

from typing import Any, cast

from lightkube import Client
from lightkube.resources.resource_v1 import DeviceTaintRule, ResourceSlice

from gpuguard.actuators import api_errors
from gpuguard.errors import NotFoundError, SourceError
from gpuguard.model import gpu_isolation


class DeviceTaints:
    def __init__(self, client: Client) -> None:
        self._client = client

    def rules(self) -> list[dict[str, Any]] | None:
        """gpuguard's rules; None when the cluster does not serve DeviceTaintRules."""
        try:
            with api_errors.translated("listing DeviceTaintRules", SourceError):
                found = self._client.list(
                    DeviceTaintRule, labels={"app.kubernetes.io/part-of": "gpuguard"}
                )
                return [r.to_dict() for r in found]
        except NotFoundError:
            return None

    def slices(self) -> list[dict[str, Any]]:
        with api_errors.translated("listing ResourceSlices", SourceError):
            found = self._client.list(
                ResourceSlice, fields={"spec.driver": gpu_isolation.DRA_DRIVER}
            )
            return [s.to_dict() for s in found]

    def put(self, rule: dict[str, Any], current: dict[str, Any] | None) -> dict[str, Any]:
        """Create the rule, or update ``current`` to it; the object the API stored."""
        name = rule["metadata"]["name"]
        with api_errors.translated(f"writing DeviceTaintRule {name}"):
            if current is None:
                stored = self._client.create(_rule(rule))
            else:
                version = current["metadata"].get("resourceVersion")
                body = {**rule, "metadata": {**rule["metadata"], "resourceVersion": version}}
                stored = self._client.replace(_rule(body))
            return stored.to_dict()

    def delete(self, name: str) -> None:
        try:
            with api_errors.translated(f"deleting DeviceTaintRule {name}"):
                self._client.delete(DeviceTaintRule, name)
        except NotFoundError:
            return  # already gone: the undo is done


def _rule(manifest: dict[str, Any]) -> DeviceTaintRule:
    return cast(DeviceTaintRule, DeviceTaintRule.from_dict(manifest))
