"""The guard's Kubernetes reader (lightkube): nodes with their GPU capacity, boot ID,
conditions and gpuguard's annotations, and the pods that hold GPUs — turned into model types.

Also the API server's own version (``GET /version``), which lightkube's ``Client`` has no call
for: it is read with an httpx2 client that lightkube's own ``client_adapter`` builds from the
``Client``'s public ``config`` — the same base URL, TLS and credentials, not a second stack.

Lightkube's errors become ``SourceError`` through ``clients.kube``, the one translator
every Kubernetes adapter uses, naming what was being read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from lightkube import Client, ConfigError
from lightkube.config import client_adapter
from lightkube.resources.core_v1 import Node, Pod

from gpuguard.clients import kube as api_errors
from gpuguard.clients import kube_lists
from gpuguard.errors import NotFoundError, SourceError
from gpuguard.model import annotation_keys, fleet, node_conditions, timestamps

GPU_RESOURCE = "nvidia.com/gpu"
_UNFINISHED = {fleet.PodPhase.PENDING, fleet.PodPhase.RUNNING, fleet.PodPhase.UNKNOWN}
_PHASES = {p.value: p for p in fleet.PodPhase}
VERSION_PATH = "/version"
_SHOWN_BODY = 200  # characters of an unexpected /version body quoted in the error


class KubernetesReader:
    """Reads Nodes and unfinished Pods with paged lists of raw JSON
    (``clients.kube_lists``), sent to the lightkube client's server with its credentials."""

    def __init__(self, client: Client, api: kube_lists.RawApi | None = None) -> None:
        self._client = client
        self._api = kube_lists.SharedApi(lambda: client.config, api)

    def nodes(self) -> tuple[fleet.Node, ...]:
        return self._api.get().list_all(kube_lists.NODES, node_from_dict).items

    def has_node(self, name: str) -> bool:
        """Whether the cluster has a Node of this name (one GET, not a list of every node)."""
        try:
            with api_errors.translated(f"reading Node {name}", SourceError):
                self._client.get(Node, name=name)
        except NotFoundError:
            return False
        return True

    def pods(self) -> tuple[fleet.Pod, ...]:
        """Pods that are not finished (GPU pods and the node's system pods alike)."""
        found = self._api.get().list_all(kube_lists.UNFINISHED_PODS, pod_from_dict).items
        return tuple(p for p in found if p.phase in _UNFINISHED)


# lightkube's config (no server, no credentials) or the call itself failing
_VERSION_ERRORS: tuple[type[Exception], ...] = (*api_errors.CALL_ERRORS, ConfigError)

def api_server_version(client: Client, timeout_s: float = 10.0) -> str:
    """The API server's ``gitVersion`` (e.g. ``v1.34.3+rke2r1``) from ``GET /version``,
    sent to ``client``'s server with its credentials."""
    params = client_adapter.ConnectionParams(timeout=api_errors.timeout(timeout_s))
    try:
        with client_adapter.Client(client.config, params) as http:
            response = http.get(VERSION_PATH)
    except _VERSION_ERRORS as e:
        raise SourceError(f"GET {VERSION_PATH} failed: {e}") from e
    return git_version_from(response.status_code, response.content)


def git_version_from(status_code: int, content: bytes) -> str:
    """``gitVersion`` out of a ``GET /version`` answer; anything else is a ``SourceError``."""
    shown = content[:_SHOWN_BODY].decode(errors="replace")
    try:
        body = json.loads(content)
    except ValueError as e:
        raise SourceError(f"GET {VERSION_PATH} answered {status_code}, not JSON: {shown}") from e
    if status_code != 200:
        message = body.get("message") if isinstance(body, dict) else None  # a k8s Status
        raise SourceError(f"GET {VERSION_PATH} answered {status_code}: {message or shown}")
    version = body.get("gitVersion") if isinstance(body, dict) else None
    if not isinstance(version, str) or not version:
        raise SourceError(f"GET {VERSION_PATH} answered no gitVersion: {shown}")
    return version


def _quantity(values: Mapping[str, str] | None, key: str) -> int:
    try:
        return int(str((values or {}).get(key, "0")))
    except ValueError:
        return 0


def node_from_object(obj: Mapping[str, object]) -> fleet.Node:
    """A Node as ``kubectl get node -o json`` prints it (a saved file); SourceError when it
    is not one."""
    try:
        return node_from_dict(obj)
    except (TypeError, AttributeError, KeyError, ValueError) as e:
        raise SourceError(f"not a Node object: {e}") from e


def node_from_api(node: Node) -> fleet.Node:
    return node_from_dict(node.to_dict())


def node_from_dict(obj: Mapping[str, Any]) -> fleet.Node:
    """A Node's JSON as the API sends it (a list item, a watch event's object) as the model
    reads it; parsed from plain dicts, not lightkube's models (fast for a whole fleet)."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise SourceError("a Node without metadata.name")
    info = status.get("nodeInfo") or {}
    conditions: list[Mapping[str, Any]] = status.get("conditions") or []
    return fleet.Node(
        name=name,
        boot_id=str(info.get("bootID") or ""),
        gpu_capacity=_quantity(status.get("capacity"), GPU_RESOURCE),
        gpu_allocatable=_quantity(status.get("allocatable"), GPU_RESOURCE),
        unschedulable=bool(spec.get("unschedulable")),
        annotations=dict(meta.get("annotations") or {}),
        labels=dict(meta.get("labels") or {}),
        conditions={str(c.get("type")): str(c.get("status")) for c in conditions},
        kubelet_version=str(info.get("kubeletVersion") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        isolation_writers=_owners(meta.get("managedFields") or [], annotation_keys.ISOLATED_AT),
        kernel_version=str(info.get("kernelVersion") or ""),
        gpu_conditions=_gpu_conditions(conditions),
    )


def _gpu_conditions(
    conditions: Iterable[Mapping[str, Any]],
) -> dict[str, node_conditions.GpuCondition]:
    """gpuguard's agent's conditions, whole (reason, message, transition time)."""
    return {
        c["type"]: node_conditions.GpuCondition(
            type=c["type"],
            status=str(c.get("status") or ""),
            reason=str(c.get("reason") or ""),
            message=str(c.get("message") or ""),
            last_transition=timestamps.parse_utc(c.get("lastTransitionTime")),
        )
        for c in conditions
        if c.get("type") in node_conditions.TYPES
    }


def _owners(entries: Iterable[Mapping[str, Any]], annotation: str) -> frozenset[str]:
    """The field managers whose ``fieldsV1`` holds ``metadata.annotations[annotation]``
    (https://kubernetes.io/docs/reference/using-api/server-side-apply/#field-management)."""
    return frozenset(
        entry.get("manager") or ""
        for entry in entries
        if f"f:{annotation}"
        in ((entry.get("fieldsV1") or {}).get("f:metadata", {}).get("f:annotations", {}))
    )


def _gpu_request(containers: Iterable[Mapping[str, Any]]) -> int:
    total = 0
    for container in containers:
        resources = container.get("resources") or {}
        wanted = resources.get("limits") or resources.get("requests") or {}
        total += _quantity(wanted, GPU_RESOURCE)
    return total


def pod_from_api(pod: Pod) -> fleet.Pod:
    return pod_from_dict(pod.to_dict())


def pod_from_dict(obj: Mapping[str, Any]) -> fleet.Pod:
    """A Pod's JSON as the API sends it, as the model reads it (plain dicts, like
    ``node_from_dict``)."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    phase = status.get("phase") or "Unknown"
    conditions: list[Mapping[str, Any]] = status.get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return fleet.Pod(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        node=spec.get("nodeName") or None,
        phase=_PHASES.get(phase, fleet.PodPhase.UNKNOWN),
        gpu_request=_gpu_request(spec.get("containers") or []),
        labels=dict(meta.get("labels") or {}),
        ready=ready,
        restarts=sum(c.get("restartCount") or 0 for c in status.get("containerStatuses") or []),
    )
