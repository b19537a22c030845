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
    returns_deleted: bool = False  # DELETE answers the object, not a Status (``deleted_status``)

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
                 create_subresources=frozenset({"eviction"}), returns_deleted=True),
    ResourceType("ConfigMap", "",                    "v1", "configmaps", namespaced=True),
    ResourceType("Event",     "",                    "v1", "events", namespaced=True,
                 extra_fields=_EVENT_FIELDS),
    ResourceType("Job",       "batch",               "v1", "jobs", namespaced=True,
                 has_status=True, extra_fields=frozenset({"status.successful"}),
                 returns_deleted=True),
    ResourceType("Lease",     "coordination.k8s.io", "v1", "leases", namespaced=True),
    ResourceType("PodDisruptionBudget", "policy",    "v1", "poddisruptionbudgets",
                 namespaced=True, has_status=True),
    ResourceType("ResourceSlice", "resource.k8s.io", "v1", "resourceslices",
                 namespaced=False, extra_fields=frozenset({"spec.driver", "spec.nodeName",
                                                           "spec.pool.name"}),
                 returns_deleted=True),
    ResourceType("DeviceTaintRule", "resource.k8s.io", "v1", "devicetaintrules",
                 namespaced=False, has_status=True, returns_deleted=True),
    # the beta of Kubernetes 1.36 (DRADeviceTaintRules gate), the same fields as v1
    ResourceType("DeviceTaintRule", "resource.k8s.io", "v1beta2", "devicetaintrules",
                 namespaced=False, has_status=True, returns_deleted=True),
)
# fmt: on
_BY_PATH = {(r.group, r.version, r.plural): r for r in RESOURCES}


class RequestRefused(store.StoreError):
    """A request the API refuses before it reaches the store (bad path, verb, body...).
    ``details``: the ``Status`` details it is answered with (None: no ``details`` key, as
    ``NewBadRequest`` answers; ``{}`` as a generic server response)."""

    def __init__(self, status: int, reason: str, message: str,
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.details = details


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
    """The ``Status`` object the real API answers a failed request with: the message and
    details of ``apimachinery/pkg/api/errors`` (``NewNotFound``, ``NewAlreadyExists``,
    ``NewConflict``, ``NewInvalid`` name the object; ``NewBadRequest`` and
    ``NewResourceExpired`` carry no details)."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": _message(error, target),
        "reason": error.reason,
        "code": error.status,
    }
    if isinstance(error, ListExpired):
        body["metadata"] = {"continue": error.continue_token}
    details = _details(error, target)
    if details is not None:
        body["details"] = details
    return body


def deleted_status(target: Target, uid: str) -> dict[str, Any]:
    """What a DELETE of a kind that does not answer the deleted object answers (the generic
    registry's ``ReturnDeletedObject`` false: every kind here but Pods, Jobs and the DRA
    kinds)."""
    details = {**_object_details(target, target.name or ""), "uid": uid}
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": details}  # fmt: skip


def qualified(resource: ResourceType) -> str:
    """``plural.group`` (``plural`` in the core group), as the API's messages name a kind."""
    return f"{resource.plural}.{resource.group}" if resource.group else resource.plural


def _message(error: store.StoreError, target: Target | None) -> str:
    name = error.name or (target.name if target else "") or ""
    if target is None or not name or isinstance(error, store.StoreApplyConflict):
        return str(error)
    if isinstance(error, store.StoreNotFound):
        return f'{qualified(target.resource)} "{name}" not found'
    if isinstance(error, store.StoreAlreadyExists):
        return f'{qualified(target.resource)} "{name}" already exists'
    if isinstance(error, store.StoreConflict):
        return (f'Operation cannot be fulfilled on {qualified(target.resource)} "{name}": the'
                " object has been modified; please apply your changes to the latest version"
                " and try again")  # fmt: skip
    return str(error)


def _details(error: store.StoreError, target: Target | None) -> dict[str, Any] | None:
    if isinstance(error, RequestRefused):
        return error.details
    if isinstance(error, store.StoreApplyConflict):
        return {"causes": list(error.causes)}
    name = error.name or (target.name if target else "") or ""
    if target is None or not name:
        return None
    if isinstance(error, store.StoreUnprocessable):
        details = _object_details(target, name)
        return {**details, "kind": target.resource.kind, "causes": list(error.causes)}
    if isinstance(error, store.StoreNotFound | store.StoreAlreadyExists | store.StoreConflict):
        return _object_details(target, name)
    return None


def _object_details(target: Target, name: str) -> dict[str, Any]:
    group = {"group": target.resource.group} if target.resource.group else {}
    return {"name": name, **group, "kind": target.resource.plural}


def unsupported_field(resource: ResourceType, label: str) -> str:
    """The API server's message for a field selector ``label`` it does not know for
    ``resource``: each kind's field-label conversion words it its own way (core kinds with
    their own labels in ``pkg/apis/core/v1/conversion.go``, batch in ``batch/v1``, DRA with
    ``runtime.DefaultMetaV1FieldSelectorConversion``'s kind, the rest by the default)."""
    if resource.kind in ("Node", "Pod", "Event"):
        return f"field label not supported: {label}"
    if resource.kind == "Job":
        return f'field label "{label}" not supported for Job'
    if resource.kind == "ResourceSlice":
        return (f"field label not supported for {resource.api_version}, Kind={resource.kind}:"
                f" {label}")  # fmt: skip
    return f'"{label}" is not a known field selector: only "metadata.name", "metadata.namespace"'


def _not_found(path: str) -> RequestRefused:
    """An unknown path: ``NewGenericServerResponse`` 404, ``details`` empty."""
    return RequestRefused(404, "NotFound", "the server could not find the requested resource",
                          details={})
