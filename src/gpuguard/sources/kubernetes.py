"""The guard's Kubernetes reader (lightkube): nodes with their GPU capacity, boot ID,
conditions and gpuguard's annotations, and the pods that hold GPUs — turned into model types.

Also the API server's own version (``GET /version``), which lightkube's ``Client`` has no call
for: it is read with an httpx2 client that lightkube's own ``client_adapter`` builds from the
``Client``'s public ``config`` — the same base URL, TLS and credentials, not a second stack.

Lightkube's errors become ``SourceError`` through ``actuators.api_errors``, the one translator
every Kubernetes adapter uses, naming what was being read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import cast

import httpx2
from lightkube import Client, ConfigError
from lightkube.config import client_adapter
from lightkube.models.core_v1 import Container, NodeCondition
from lightkube.models.meta_v1 import ManagedFieldsEntry
from lightkube.resources.core_v1 import Node, Pod

from gpuguard.actuators import api_errors
from gpuguard.errors import NotFoundError, SourceError
from gpuguard.model import annotation_keys, fleet, node_conditions

GPU_RESOURCE = "nvidia.com/gpu"
_UNFINISHED = {fleet.PodPhase.PENDING, fleet.PodPhase.RUNNING, fleet.PodPhase.UNKNOWN}
_PHASES = {p.value: p for p in fleet.PodPhase}
VERSION_PATH = "/version"
_SHOWN_BODY = 200  # characters of an unexpected /version body quoted in the error


class KubernetesReader:
    """Reads Nodes and GPU Pods through one lightkube client."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def nodes(self) -> tuple[fleet.Node, ...]:
        with api_errors.translated("listing Nodes", SourceError):
            return tuple(node_from_api(n) for n in self._client.list(Node))

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
        with api_errors.translated("listing Pods", SourceError):
            pods = (pod_from_api(p) for p in self._client.list(Pod, namespace="*"))
            return tuple(p for p in pods if p.phase in _UNFINISHED)


def api_server_version(client: Client, timeout_s: float = 10.0) -> str:
    """The API server's ``gitVersion`` (e.g. ``v1.34.3+rke2r1``) from ``GET /version``,
    sent to ``client``'s server with its credentials."""
    params = client_adapter.ConnectionParams(timeout=httpx2.Timeout(timeout_s))
    try:
        with client_adapter.Client(client.config, params) as http:
            response = http.get(VERSION_PATH)
    except (httpx2.HTTPError, ConfigError) as e:
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
        return node_from_api(cast(Node, Node.from_dict(dict(obj))))
    except (TypeError, AttributeError, KeyError, ValueError) as e:
        raise SourceError(f"not a Node object: {e}") from e


def node_from_api(node: Node) -> fleet.Node:
    meta, spec, status = node.metadata, node.spec, node.status
    if meta is None or meta.name is None:
        raise SourceError("a Node without metadata.name")
    info = status.nodeInfo if status else None
    return fleet.Node(
        name=meta.name,
        boot_id=info.bootID if info else "",
        gpu_capacity=_quantity(status.capacity if status else None, GPU_RESOURCE),
        gpu_allocatable=_quantity(status.allocatable if status else None, GPU_RESOURCE),
        unschedulable=bool(spec and spec.unschedulable),
        annotations=dict(meta.annotations or {}),
        labels=dict(meta.labels or {}),
        conditions={c.type: c.status for c in (status.conditions or [])} if status else {},
        kubelet_version=info.kubeletVersion if info else "",
        resource_version=meta.resourceVersion or "",
        isolation_writers=_owners(meta.managedFields or [], annotation_keys.ISOLATED_AT),
        kernel_version=info.kernelVersion if info else "",
        gpu_conditions=_gpu_conditions(status.conditions or [] if status else []),
    )


def _gpu_conditions(
    conditions: Iterable[NodeCondition],
) -> dict[str, node_conditions.GpuCondition]:
    """gpuguard's agent's conditions, whole (reason, message, transition time)."""
    return {
        c.type: node_conditions.GpuCondition(
            type=c.type,
            status=c.status,
            reason=c.reason or "",
            message=c.message or "",
            last_transition=c.lastTransitionTime,
        )
        for c in conditions
        if c.type in node_conditions.TYPES
    }


def _owners(entries: Iterable[ManagedFieldsEntry], annotation: str) -> frozenset[str]:
    """The field managers whose ``fieldsV1`` holds ``metadata.annotations[annotation]``
    (https://kubernetes.io/docs/reference/using-api/server-side-apply/#field-management)."""
    return frozenset(
        entry.manager or ""
        for entry in entries
        if f"f:{annotation}"
        in ((entry.fieldsV1 or {}).get("f:metadata", {}).get("f:annotations", {}))
    )


def _gpu_request(containers: Iterable[Container]) -> int:
    total = 0
    for container in containers:
        resources = container.resources
        wanted = (resources.limits or resources.requests or {}) if resources else {}
        total += _quantity(wanted, GPU_RESOURCE)
    return total


def pod_from_api(pod: Pod) -> fleet.Pod:
    meta, spec, status = pod.metadata, pod.spec, pod.status
    phase = (status.phase if status else None) or "Unknown"
    conditions = (status.conditions or []) if status else []
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    return fleet.Pod(
        namespace=(meta.namespace if meta else None) or "",
        name=(meta.name if meta else None) or "",
        node=spec.nodeName if spec else None,
        phase=_PHASES.get(phase, fleet.PodPhase.UNKNOWN),
        gpu_request=_gpu_request(spec.containers if spec else []),
        labels=dict((meta.labels if meta else None) or {}),
        ready=ready,
        restarts=sum(c.restartCount or 0 for c in (status.containerStatuses or []))
        if status
        else 0,
    )
