"""The DRA route's API calls: read the ResourceSlices, and create, update or delete
gpuguard's ``DeviceTaintRule`` objects
(https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/
#device-taints-and-tolerations): ``resource.k8s.io/v1`` (Kubernetes 1.37+), else the beta
``resource.k8s.io/v1beta2`` (1.36 with the ``DRADeviceTaintRules`` gate; the same fields).
Which one the cluster serves is found by listing the rules: a 404 tries the next version
(the one that answered is tried first at the next tick); 404 on both means the cluster has
no DeviceTaintRules. Writes go to the version that answered the list.
"""

from __future__ import annotations

from typing import Any, cast

from lightkube import Client
from lightkube.resources import resource_v1, resource_v1beta2
from lightkube.resources.resource_v1 import ResourceSlice

from gpuguard.clients import kube as api_errors
from gpuguard.errors import NotFoundError, SourceError
from gpuguard.model import gpu_isolation

DeviceTaintRule = resource_v1.DeviceTaintRule | resource_v1beta2.DeviceTaintRule
"""A rule of either version (the same fields)."""
Kind = type[DeviceTaintRule]
KINDS: tuple[Kind, ...] = (resource_v1.DeviceTaintRule, resource_v1beta2.DeviceTaintRule)
"""GA first, then the beta (policy/gpu_route.API_VERSIONS names the same two)."""


def api_version(kind: Kind) -> str:
    info = kind._api_info.resource
    return f"{info.group}/{info.version}"


class DeviceTaints:
    def __init__(self, client: Client) -> None:
        self._client = client
        self._kind: Kind = KINDS[0]

    @property
    def served(self) -> str:
        """The apiVersion the last list answered on (the first one before any list)."""
        return api_version(self._kind)

    def rules(self) -> list[dict[str, Any]] | None:
        """gpuguard's rules; None when the cluster serves DeviceTaintRules in no version."""
        for kind in (self._kind, *(k for k in KINDS if k is not self._kind)):
            try:
                rules = self._list(kind)
            except NotFoundError:
                continue
            self._kind = kind
            return rules
        return None

    def _list(self, kind: type[DeviceTaintRule]) -> list[dict[str, Any]]:
        with api_errors.translated("listing DeviceTaintRules", SourceError):
            found = self._client.list(kind, labels={"app.kubernetes.io/part-of": "gpuguard"})
            return [r.to_dict() for r in found]

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
            body = {**rule, "apiVersion": self.served}
            if current is None:
                stored = self._client.create(self._rule(body))
            else:
                version = current["metadata"].get("resourceVersion")
                body["metadata"] = {**rule["metadata"], "resourceVersion": version}
                stored = self._client.replace(self._rule(body))
            return stored.to_dict()

    def delete(self, name: str) -> None:
        try:
            with api_errors.translated(f"deleting DeviceTaintRule {name}"):
                self._delete(self._kind, name)
        except NotFoundError:
            return  # already gone: the undo is done

    def _delete(self, kind: type[DeviceTaintRule], name: str) -> None:
        self._client.delete(kind, name)

    def _rule(self, manifest: dict[str, Any]) -> DeviceTaintRule:
        return cast(DeviceTaintRule, self._kind.from_dict(manifest))
