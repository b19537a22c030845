"""The simulator's Kubernetes object store: what its API server serves over HTTP.

Objects are plain JSON dicts as the real API returns them. Every write bumps one global,
strictly increasing ``resourceVersion``; a replace or merge-patch carrying a stale
``metadata.resourceVersion`` raises StoreConflict (HTTP 409). The world and the HTTP API
both write through this one store, so a human's cordon in a scenario and gpuguard's patch
race exactly as they would on a real cluster.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

Obj = dict[str, Any]


class StoreError(Exception):
    """Base for store errors; carries the HTTP status the API server answers with."""

    status = 500


class StoreConflict(StoreError):
    status = 409


class StoreNotFound(StoreError):
    status = 404


class StoreAlreadyExists(StoreError):
    status = 409


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: dicts merge recursively, ``None`` deletes, the rest replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class ObjectStore:
    """Thread-safe in-memory objects keyed by (kind, namespace, name); namespace "" = cluster."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._objects: dict[tuple[str, str, str], Obj] = {}
        self._rv = 0

    def _bump(self, obj: Obj) -> Obj:
        self._rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._rv)
        return obj

    @property
    def resource_version(self) -> int:
        return self._rv

    def get(self, kind: str, namespace: str, name: str) -> Obj:
        with self._lock:
            try:
                return copy.deepcopy(self._objects[(kind, namespace, name)])
            except KeyError:
                raise StoreNotFound(f"{kind} {namespace}/{name} not found") from None

    def list(self, kind: str, namespace: str | None = None) -> list[Obj]:
        with self._lock:
            return [
                copy.deepcopy(o)
                for (k, ns, _), o in sorted(self._objects.items())
                if k == kind and (namespace is None or ns == namespace)
            ]

    def create(self, kind: str, namespace: str, obj: Obj) -> Obj:
        name = obj.get("metadata", {}).get("name")
        if not name:
            raise StoreError(f"{kind} without metadata.name")
        with self._lock:
            key = (kind, namespace, name)
            if key in self._objects:
                raise StoreAlreadyExists(f"{kind} {namespace}/{name} already exists")
            stored = copy.deepcopy(obj)
            if namespace:
                stored["metadata"]["namespace"] = namespace
            self._objects[key] = self._bump(stored)
            return copy.deepcopy(stored)

    def merge_patch(self, kind: str, namespace: str, name: str, patch: Obj) -> Obj:
        with self._lock:
            current = self._objects.get((kind, namespace, name))
            if current is None:
                raise StoreNotFound(f"{kind} {namespace}/{name} not found")
            self._check_precondition(current, patch)
            updated = merge_patch(current, patch)
            self._objects[(kind, namespace, name)] = self._bump(updated)
            return copy.deepcopy(updated)

    def replace(self, kind: str, namespace: str, name: str, obj: Obj) -> Obj:
        with self._lock:
            current = self._objects.get((kind, namespace, name))
            if current is None:
                raise StoreNotFound(f"{kind} {namespace}/{name} not found")
            self._check_precondition(current, obj)
            stored = copy.deepcopy(obj)
            self._objects[(kind, namespace, name)] = self._bump(stored)
            return copy.deepcopy(stored)

    def delete(self, kind: str, namespace: str, name: str) -> Obj:
        with self._lock:
            try:
                removed = self._objects.pop((kind, namespace, name))
            except KeyError:
                raise StoreNotFound(f"{kind} {namespace}/{name} not found") from None
            return self._bump(removed)

    @staticmethod
    def _check_precondition(current: Obj, incoming: Obj) -> None:
        wanted = (incoming.get("metadata") or {}).get("resourceVersion")
        have = current["metadata"]["resourceVersion"]
        if wanted is not None and str(wanted) != have:
            raise StoreConflict(f"resourceVersion {wanted} is stale (current {have})")
