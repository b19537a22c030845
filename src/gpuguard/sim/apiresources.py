"""The Kubernetes resources the simulator's API server serves, and how URLs name them.

One table says which kinds exist, where they live (``/api/v1`` or ``/apis/<group>/<v>``),
whether they are namespaced, whether they have a ``status`` subresource and which field
selectors the real API accepts for them. ``parse_path`` turns a request path into a
``Target``; ``status_body`` builds the ``Status`` object every error is answered with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuguard.sim import store

# Field selectors the real API accepts per kind (others are a 400, as there).
# fmt: off
_COMMON_FIELDS = frozenset({"metadata.name", "metadata.namespace"})
_POD_FIELDS = frozenset({
    "spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
    "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName",
})
_EVENT_FIELDS = frozenset({
    "involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
    "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
    "involvedObject.fieldPath", "reason", "reportingComponent", "type",
})
# fmt: on


@dataclass(frozen=True)
class ResourceType:
    """One kind the server serves: its URL parts, scope, subresource and field selectors."""

    kind: str
    group: str  # "" = the core group
    version: str
    plural: str
    namespaced: bool
    has_status: bool = False
    extra_fields: frozenset[str] = frozenset()
    create_subresources: frozenset[str] = frozenset()  # POST-only, e.g. pods/eviction

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def served_as(self) -> str:
        """``group/version/plural``: how a server that does not serve it withholds it."""
        return f"{self.api_version}/{self.plural}"

    @property
    def field_labels(self) -> frozenset[str]:
        return _COMMON_FIELDS | self.extra_fields

    def decorate(self, obj: store.Obj) -> store.Obj:
        """The object with ``kind``/``apiVersion`` set (lightkube decodes by them)."""
        return {**obj, "kind": self.kind, "apiVersion": self.api_version}


# fmt: off
RESOURCES = (
    #            kind         group                  ver   plural
    ResourceType("Node",      "",                    "v1", "nodes", namespaced=False,
                 has_status=True, extra_fields=frozenset({"spec.unschedulable"})),
    ResourceType("Pod",       "",                    "v1", "pods", namespaced=True,
                 has_status=True, extra_fields=_POD_FIELDS,
                 create_subresources=frozenset({"eviction"})),
    ResourceType("ConfigMap", "",                    "v1", "configmaps", namespaced=True),
    ResourceType("Event",     "",                    "v1", "events", namespaced=True,
                 extra_fields=_EVENT_FIELDS),
    ResourceType("Job",       "batch",               "v1", "jobs", namespaced=True,
                 has_status=True, extra_fields=frozenset({"status.successful"})),
    ResourceType("Lease",     "coordination.k8s.io", "v1", "leases", namespaced=True),
    ResourceType("PodDisruptionBudget", "policy",    "v1", "poddisruptionbudgets",
                 namespaced=True, has_status=True),
    ResourceType("ResourceSlice", "resource.k8s.io", "v1", "resourceslices",
                 namespaced=False, extra_fields=frozenset({"spec.driver", "spec.nodeName",
                                                           "spec.pool.name"})),
    ResourceType("DeviceTaintRule", "resource.k8s.io", "v1", "devicetaintrules",
                 namespaced=False, has_status=True),
    # the beta of Kubernetes 1.36 (DRADeviceTaintRules gate), the same fields as v1
    ResourceType("DeviceTaintRule", "resource.k8s.io", "v1beta2", "devicetaintrules",
                 namespaced=False, has_status=True),
)
# fmt: on
_BY_PATH = {(r.group, r.version, r.plural): r for r in RESOURCES}


class RequestRefused(store.StoreError):
    """A request the API refuses before it reaches the store (bad path, verb, body...)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class ListExpired(RequestRefused):
    """A paged list's continue token older than the history (HTTP 410, reason Expired); the
    answer carries a token that continues from the newest state (an inconsistent remainder),
    as the real API server's does."""

    def __init__(self, message: str, continue_token: str) -> None:
        super().__init__(410, "Expired", message)
        self.continue_token = continue_token


@dataclass(frozen=True)
class Target:
    """What a request path names: a collection (``name`` None) or one object."""

    resource: ResourceType
    namespace: str | None  # None: every namespace (list/watch only); "" for cluster-scoped
    name: str | None = None
    subresource: str | None = None


def parse_path(path: str, withheld: frozenset[str] = frozenset()) -> Target:
    """``/api/v1/namespaces/ns/pods/p/status`` → Target(Pod, "ns", "p", "status").
    ``withheld``: resources (``served_as``) this server does not serve, a 404 as there."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"]:
        group, rest = "", parts[1:]
    elif parts[:1] == ["apis"] and len(parts) > 1:
        group, rest = parts[1], parts[2:]
    else:
        raise _not_found(path)
    if len(rest) < 2:
        raise _not_found(path)
    version, rest = rest[0], rest[1:]
    namespace: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource = _BY_PATH.get((group, version, rest[0]))
    if resource is None or len(rest) > 3 or (namespace is not None and not resource.namespaced):
        raise _not_found(path)
    if resource.served_as in withheld:
        raise _not_found(path)
    return _target(resource, namespace, rest[1:], path)


def _target(resource: ResourceType, namespace: str | None, rest: list[str], path: str) -> Target:
    name = rest[0] if rest else None
    subresource = rest[1] if len(rest) > 1 else None
    known = resource.create_subresources | ({"status"} if resource.has_status else set())
    if subresource is not None and subresource not in known:
        raise _not_found(path)
    if not resource.namespaced:
        namespace = ""
    elif namespace is None and name is not None:
        raise _not_found(path)
    return Target(resource, namespace, name, subresource)


def status_body(error: store.StoreError, target: Target | None = None) -> dict[str, Any]:
    """The ``Status`` object the real API answers a failed request with."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": str(error),
        "reason": error.reason,
        "code": error.status,
    }
    if isinstance(error, ListExpired):
        body["metadata"] = {"continue": error.continue_token}
    if target is not None:
        details = {"kind": target.resource.plural, "name": target.name}
        body["details"] = {k: v for k, v in details.items() if v}
    return body


def _not_found(path: str) -> RequestRefused:
    message = f"the server could not find the requested resource ({path})"
    return RequestRefused(404, "NotFound", message)
