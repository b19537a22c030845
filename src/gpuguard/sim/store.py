"""The simulator's Kubernetes object store: what its API server serves over HTTP.

Objects are plain JSON dicts as the real API returns them. Every write bumps one global,
strictly increasing ``resourceVersion``; a replace or merge-patch carrying a stale
``metadata.resourceVersion`` raises StoreConflict (HTTP 409). The world and the HTTP API
both write through this one store, so a human's cordon in a scenario and gpuguard's patch
race exactly as they would on a real cluster.

Every write is also kept as a ``Change`` in a bounded history, so watchers can follow the
store from any recent resourceVersion; asking for one older than the history is
StoreGone (HTTP 410), as on a real API server after etcd compaction. The same history lets
``snapshot`` answer what a kind held at any resourceVersion it still reaches: a paged list
reads every page from the first page's resourceVersion, as etcd serves it
(https://kubernetes.io/docs/reference/using-api/api-concepts/#retrieving-large-results-sets-in-chunks).

Stored objects are never changed in place (every write stores a new dict), so snapshots,
watch events and the serialized bytes the API server caches (``encoded``) share them
without copying.
"""

from __future__ import annotations

import bisect
import builtins
import collections
import dataclasses
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TypeVar, cast

from gpuguard import errors
from gpuguard.model import timestamps
from gpuguard.sim import managed_fields, server_side_apply, strategic_merge

Obj = dict[str, Any]
_T = TypeVar("_T")

DEFAULT_HISTORY = 10_000
SNAPSHOTS_KEPT = 8  # paged lists being read at once; an evicted one is rebuilt from history
MAX_CONFIGMAP_BYTES = 1024 * 1024
"""``corevalidation.MaxConfigMapSize``: data + binaryData keys and values, 1 MiB."""
MAX_ANNOTATION_BYTES = 256 * 1024
"""``apimachinery`` ``TotalAnnotationSizeLimitB``: every annotation key and value, 256 KiB."""
_NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the real API's generateName letters
GENERATION_KINDS = frozenset({"Pod", "Job", "PodDisruptionBudget", "ResourceSlice",
                              "DeviceTaintRule"})
"""Kinds whose registry strategy keeps ``metadata.generation`` (1 on create, +1 on a spec
change: e.g. ``jobStrategy.PrepareForCreate``); Nodes, ConfigMaps, Leases and Events have
none (held to a real API server by ``tests/realcluster/test_api_differential.py``)."""
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_SUBDOMAIN_MAX = 253


class StoreError(errors.GpuguardError):
    """Base for store errors; carries the HTTP status and Status reason the API answers with,
    the name of the object it is about (``""``: none) and, for a 422, the ``causes`` of the
    ``Status`` details (``{"reason", "message", "field"}``, as ``field.Error`` gives them)."""

    status = 500
    reason = "InternalError"

    def __init__(self, message: str, *, name: str = "",
                 causes: tuple[dict[str, str], ...] = ()) -> None:
        super().__init__(message)
        self.name = name
        self.causes = causes


class StoreInvalid(StoreError, errors.InputError):
    status = 400
    reason = "BadRequest"


class StoreUnprocessable(StoreError, errors.InputError):
    """The object fails the API server's validation (HTTP 422, reason ``Invalid``)."""

    status = 422
    reason = "Invalid"


class StoreConflict(StoreError, errors.ConflictError):
    status = 409
    reason = "Conflict"


class StoreNotFound(StoreError, errors.NotFoundError):
    status = 404
    reason = "NotFound"


class StoreApplyConflict(StoreConflict):
    """A server-side apply that would take fields other managers own (``causes``: which)."""


class StoreAlreadyExists(StoreError):
    status = 409
    reason = "AlreadyExists"


class StoreGone(StoreError):
    """The requested resourceVersion is older than the kept history (watch must re-list)."""

    status = 410
    reason = "Expired"


class ChangeType(StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


class Scope(StrEnum):
    """Which part of an object a write may change (the real API's status subresource rule)."""

    WHOLE = "whole"  # the world writes everything
    MAIN = "main"  # PUT/PATCH on the resource itself: status is kept as stored
    STATUS = "status"  # PUT/PATCH on .../status: spec is kept as stored


@dataclass(frozen=True)
class Snapshot:
    """What one kind (in one namespace, or all) held at ``resource_version``: its keys
    ``(namespace, name)`` sorted, and the objects in the same order. Shared: read only."""

    resource_version: int
    keys: tuple[tuple[str, str], ...]
    objects: tuple[Obj, ...]


@dataclass(frozen=True)
class Change:
    """One write, as a watcher sees it. ``previous`` is the object before a MODIFIED or a
    DELETED."""

    type: ChangeType
    kind: str
    namespace: str
    resource_version: int
    object: Obj
    previous: Obj | None = None


def clone(value: _T) -> _T:
    """A deep copy of JSON data (dicts, lists, scalars): what ``copy.deepcopy`` gives, several
    times faster — the store copies every object it takes in and hands out."""
    if isinstance(value, dict):
        return cast(_T, {k: clone(v) for k, v in value.items()})
    if isinstance(value, list):
        return cast(_T, [clone(v) for v in value])
    return value


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: dicts merge recursively, ``None`` deletes, the rest replaces."""
    if not isinstance(patch, dict):
        return clone(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _utc_now() -> datetime:
    return datetime.now(UTC)


def format_timestamp(when: datetime) -> str:
    """Kubernetes' ``metav1.Time`` form: RFC 3339, UTC, whole seconds."""
    return timestamps.format_utc(when)


class ObjectStore:
    """Thread-safe in-memory objects keyed by (kind, namespace, name); namespace "" = cluster.

    ``now`` stamps ``metadata.creationTimestamp`` (pass the world's SimClock.now);
    ``history`` bounds how many changes a watcher can replay.
    """

    def __init__(
        self, now: Callable[[], datetime] = _utc_now, history: int = DEFAULT_HISTORY
    ) -> None:
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._objects: dict[tuple[str, str, str], Obj] = {}
        self._rv = 0
        self._now = now
        self._history: collections.deque[Change] = collections.deque(maxlen=history)
        self._compacted_through = 0  # the newest resourceVersion no longer in the history
        self._index: dict[str, builtins.list[tuple[str, str]]] = {}  # kind → sorted keys
        self._snapshots: collections.OrderedDict[tuple[str, str | None, int], Snapshot] = (
            collections.OrderedDict()
        )
        self._wire: dict[tuple[str, str, str], tuple[Obj, dict[str, bytes]]] = {}

    @property
    def resource_version(self) -> int:
        return self._rv

    def get(self, kind: str, namespace: str, name: str) -> Obj:
        with self._lock:
            return clone(self._current(kind, namespace, name))

    def list(self, kind: str, namespace: str | None = None) -> list[Obj]:
        """Objects of ``kind`` sorted by (namespace, name); ``namespace=None`` = all."""
        return self.list_with_version(kind, namespace)[0]

    def list_with_version(
        self, kind: str, namespace: str | None = None
    ) -> tuple[builtins.list[Obj], int]:
        """Like ``list``, plus the resourceVersion the list was taken at (to watch from)."""
        with self._lock:
            snapshot = self.snapshot(kind, namespace)
            return [clone(o) for o in snapshot.objects], snapshot.resource_version

    def snapshot(
        self, kind: str, namespace: str | None = None, resource_version: int | None = None
    ) -> Snapshot:
        """``kind``'s objects at ``resource_version`` (None: now), without copying them.

        A past version is rebuilt from the change history (StoreGone when the history no
        longer reaches it, as etcd answers a read at a compacted revision); the last few
        snapshots are kept, so reading a list page by page costs one build, not one a page.
        """
        with self._lock:
            at = self._rv if resource_version is None else resource_version
            if at > self._rv:
                raise StoreInvalid(f"resourceVersion {at} is newer than the store ({self._rv})")
            if at < self._compacted_through:  # compacted: gone even if a snapshot is kept
                raise StoreGone(f"too old resource version: {at} ({self._compacted_through})")
            cached = self._snapshots.get((kind, namespace, at))
            if cached is not None:
                self._snapshots.move_to_end((kind, namespace, at))
                return cached
            built = self._build_snapshot(kind, namespace, at)
            self._snapshots[(kind, namespace, at)] = built
            while len(self._snapshots) > SNAPSHOTS_KEPT:
                self._snapshots.popitem(last=False)
            return built

    def _build_snapshot(self, kind: str, namespace: str | None, at: int) -> Snapshot:
        keys = self._index.get(kind, [])
        if namespace is not None:
            keys = keys[bisect.bisect_left(keys, (namespace, "")):
                        bisect.bisect_left(keys, (namespace + "\x00", ""))]
        if at == self._rv:
            objects = tuple(self._objects[(kind, ns, name)] for ns, name in keys)
            return Snapshot(at, tuple(keys), objects)
        state = {key: self._objects[(kind, *key)] for key in keys}
        for change in reversed(self._history):  # undo every change newer than ``at``
            if change.resource_version <= at:
                break
            key = (change.namespace, change.object["metadata"]["name"])
            if change.kind != kind or namespace not in (None, change.namespace):
                continue
            if change.type is ChangeType.ADDED:
                state.pop(key, None)
            elif change.previous is not None:  # MODIFIED or DELETED: what it was before
                state[key] = change.previous
        ordered = sorted(state)
        return Snapshot(at, tuple(ordered), tuple(state[k] for k in ordered))

    def encoded(self, kind: str, obj: Obj, variant: str, encode: Callable[[Obj], bytes]) -> bytes:
        """``encode(obj)``, kept while ``obj`` is the stored version of its object, so an
        object listed or watched many times is serialized once per ``variant`` (e.g. the
        apiVersion it is served as)."""
        metadata = obj.get("metadata", {})
        key = (kind, metadata.get("namespace", ""), metadata.get("name", ""))
        entry = self._wire.get(key)
        if entry is not None and entry[0] is obj:
            cached = entry[1].get(variant)
            if cached is None:
                cached = entry[1][variant] = encode(obj)
            return cached
        data = encode(obj)
        if self._objects.get(key) is obj:
            self._wire[key] = (obj, {variant: data})
        return data

    def create(self, kind: str, namespace: str, obj: Obj, *, manager: str | None = None) -> Obj:
        """Store a new object; fills name (from generateName), namespace and generation, and
        uid and creationTimestamp unless given (the world backdates objects it seeds).
        ``manager``: the field manager of an API request (``sim.managed_fields``)."""
        with self._lock:
            stored = clone(obj)
            metadata = stored.setdefault("metadata", {})
            name = metadata.get("name") or self._generated_name(kind, metadata)
            key = (kind, namespace, name)
            if key in self._objects:
                raise StoreAlreadyExists(f'{kind} "{name}" already exists in "{namespace}"',
                                         name=name)
            self._fill_server_fields(metadata, kind, namespace, name)
            validate_name(kind, name)
            validate_limits(kind, stored)
            self._manage(kind, None, stored, manager, Scope.MAIN)
            self._write(key, stored, ChangeType.ADDED)
            return clone(stored)

    def merge_patch(
        self,
        kind: str,
        namespace: str,
        name: str,
        patch: Obj,
        *,
        scope: Scope = Scope.WHOLE,
        manager: str | None = None,
        strategic: bool = False,
    ) -> Obj:
        """RFC 7386 merge ``patch`` into the object; a ``metadata.resourceVersion`` in the
        patch is a precondition (StoreConflict when stale). ``scope`` limits what changes;
        ``manager`` is the field manager recorded in ``managedFields``. ``strategic``: a
        strategic merge patch instead (``sim.strategic_merge``: lists with a merge key merge
        item by item, so a Node condition of one type leaves the others alone)."""
        with self._lock:
            current = self._current(kind, namespace, name)
            self._check_precondition(current, patch)
            try:
                merged = (strategic_merge.apply(kind, current, patch) if strategic
                          else merge_patch(current, patch))
            except strategic_merge.PatchInvalid as e:
                raise StoreInvalid(str(e)) from e
            updated = _within_scope(current, merged, scope)
            return self._update((kind, namespace, name), current, updated, manager, scope)

    def patch_with(
        self,
        kind: str,
        namespace: str,
        name: str,
        change: Callable[[Obj], Obj],
        *,
        scope: Scope = Scope.WHOLE,
        manager: str | None = None,
    ) -> Obj:
        """Write ``change(current)`` (a new object; e.g. a JSON patch applied) in one step,
        under the store's lock, so no other write comes between the read and the write."""
        with self._lock:
            current = self._current(kind, namespace, name)
            updated = _within_scope(current, change(current), scope)
            return self._update((kind, namespace, name), current, updated, manager, scope)

    def apply(self, kind: str, namespace: str, name: str, config: Obj, *, manager: str,
              force: bool) -> tuple[Obj, bool]:
        """Server-side apply ``config`` as ``manager`` (``sim.server_side_apply``): the object,
        created (True) or updated; StoreApplyConflict when it would take others' fields."""
        with self._lock:
            live = self._objects.get((kind, namespace, name))
            api_version = str(config.get("apiVersion", "v1"))
            try:
                result = server_side_apply.apply(live, config, manager, force=force,
                                                 api_version=api_version,
                                                 at=format_timestamp(self._now()))
            except server_side_apply.ApplyConflict as e:
                message, causes = server_side_apply.conflict_message(e.conflicts)
                raise StoreApplyConflict(message, causes=tuple(causes)) from e
            if live is None:
                return self.create(kind, namespace, {**result, "metadata": {
                    **result.get("metadata", {}), "name": name}}), True
            return self.replace(kind, namespace, name, result, scope=Scope.MAIN), False

    def replace(
        self,
        kind: str,
        namespace: str,
        name: str,
        obj: Obj,
        *,
        scope: Scope = Scope.WHOLE,
        manager: str | None = None,
    ) -> Obj:
        """Replace the object (uid, creationTimestamp kept); a ``metadata.resourceVersion``
        in ``obj`` is a precondition (StoreConflict when stale)."""
        with self._lock:
            current = self._current(kind, namespace, name)
            self._check_precondition(current, obj)
            updated = _within_scope(current, obj, scope)
            return self._update((kind, namespace, name), current, updated, manager, scope)

    def delete(self, kind: str, namespace: str, name: str) -> Obj:
        """Remove the object; returns its last state, at the deletion's resourceVersion."""
        with self._lock:
            current = self._current(kind, namespace, name)
            removed = clone(current)
            self._write((kind, namespace, name), removed, ChangeType.DELETED, previous=current)
            return clone(removed)

    def changes_since(self, resource_version: int, timeout: float = 0.0) -> builtins.list[Change]:
        """Changes newer than ``resource_version``, oldest first (copies).

        Waits up to ``timeout`` seconds for one when there is none yet; may return an empty
        list early when ``wake_watchers`` is called. Raises StoreGone when the history no
        longer reaches back to ``resource_version``.
        """
        changes, _ = self.changes_after(resource_version, timeout)
        return [dataclasses.replace(c, object=clone(c.object),
                                    previous=None if c.previous is None else clone(c.previous))
                for c in changes]

    def changes_after(
        self, resource_version: int, timeout: float = 0.0
    ) -> tuple[builtins.list[Change], int]:
        """Like ``changes_since`` but shared, not copied (read only), and with the
        resourceVersion the answer is complete through — a watcher that saw every change up
        to it may resume from it (what a watch BOOKMARK tells its client)."""
        with self._changed:
            if resource_version < self._compacted_through:
                raise StoreGone(
                    f"too old resource version: {resource_version} ({self._compacted_through})"
                )
            if self._rv <= resource_version and timeout > 0:
                self._changed.wait(timeout)
            newer = []
            for change in reversed(self._history):
                if change.resource_version <= resource_version:
                    break
                newer.append(change)
            return newer[::-1], max(self._rv, resource_version)

    def wake_watchers(self) -> None:
        """Wake every ``changes_since`` waiter now (used when the API server stops)."""
        with self._changed:
            self._changed.notify_all()

    def _current(self, kind: str, namespace: str, name: str) -> Obj:
        try:
            return self._objects[(kind, namespace, name)]
        except KeyError:
            where = f' in "{namespace}"' if namespace else ""
            raise StoreNotFound(f'{kind} "{name}" not found{where}', name=name) from None

    def _update(
        self, key: tuple[str, str, str], current: Obj, updated: Obj, manager: str | None,
        scope: Scope = Scope.WHOLE,
    ) -> Obj:
        stored = clone(updated)
        metadata = stored.setdefault("metadata", {})
        for field in ("name", "namespace", "uid", "creationTimestamp", "generation"):
            if field in current["metadata"]:
                metadata[field] = current["metadata"][field]
        if "managedFields" in current["metadata"] and not metadata.get("managedFields"):
            metadata["managedFields"] = clone(current["metadata"]["managedFields"])
        if stored.get("spec") != current.get("spec") and "generation" in metadata:
            metadata["generation"] = int(metadata.get("generation", 0)) + 1
        validate_limits(key[0], stored)
        self._manage(key[0], current, stored, manager, scope)
        self._write(key, stored, ChangeType.MODIFIED, previous=current)
        return clone(stored)

    def _manage(self, kind: str, current: Obj | None, stored: Obj, manager: str | None,
                scope: Scope) -> None:
        """Record ``manager``'s write in ``managedFields``; the world's own writes (manager
        None) are not API requests and record nothing."""
        if manager is not None:
            api_version = str(stored.get("apiVersion", "v1"))
            when = format_timestamp(self._now())
            subresource = managed_fields.STATUS if scope is Scope.STATUS else ""
            managed_fields.record(current, stored, manager, api_version, when,
                                  subresource=subresource, kind=kind)

    def _write(
        self, key: tuple[str, str, str], obj: Obj, change: ChangeType, previous: Obj | None = None
    ) -> None:
        """Bump the resourceVersion, apply, record the change and wake watchers."""
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        kind, namespace, name = key
        self._wire.pop(key, None)
        if change is ChangeType.DELETED:
            self._objects.pop(key, None)
            keys = self._index[kind]
            del keys[bisect.bisect_left(keys, (namespace, name))]
        else:
            if change is ChangeType.ADDED:
                bisect.insort(self._index.setdefault(kind, []), (namespace, name))
            self._objects[key] = obj
        if len(self._history) == self._history.maxlen:
            self._compacted_through = self._history[0].resource_version
        self._history.append(Change(change, kind, namespace, self._rv, obj, previous))
        self._changed.notify_all()

    def _fill_server_fields(self, metadata: Obj, kind: str, namespace: str, name: str) -> None:
        metadata.pop("namespace", None)
        if namespace:
            metadata["namespace"] = namespace
        metadata["name"] = name
        if kind in GENERATION_KINDS:
            metadata["generation"] = 1
        uid_seed = f"{kind}/{namespace}/{name}/{self._rv + 1}"  # reproducible across runs
        metadata.setdefault("uid", str(uuid.uuid5(uuid.NAMESPACE_URL, uid_seed)))
        metadata.setdefault("creationTimestamp", format_timestamp(self._now()))

    def _generated_name(self, kind: str, metadata: Obj) -> str:
        prefix = metadata.get("generateName")
        if not prefix:
            raise StoreInvalid(f"{kind} needs metadata.name or metadata.generateName")
        n, suffix = self._rv + 1, ""
        for _ in range(5):
            n, digit = divmod(n, len(_NAME_SUFFIX_ALPHABET))
            suffix += _NAME_SUFFIX_ALPHABET[digit]
        return f"{prefix}{suffix}"

    @staticmethod
    def _check_precondition(current: Obj, incoming: Obj) -> None:
        wanted = (incoming.get("metadata") or {}).get("resourceVersion")
        have = current["metadata"]["resourceVersion"]
        if wanted is not None and str(wanted) != have:
            raise StoreConflict(
                "the object has been modified; please apply your changes to the latest version"
                f" and try again (resourceVersion {wanted} is stale, current {have})",
                name=current["metadata"]["name"],
            )


def validate_name(kind: str, name: str) -> None:
    """A name the API server accepts: a lowercase RFC 1123 subdomain, as every kind here
    requires (``apimachinery`` ``IsDNS1123Subdomain`` via ``ValidateObjectMeta``); 422 with
    the server's message otherwise."""
    if len(name) <= _DNS_SUBDOMAIN_MAX and _DNS_SUBDOMAIN.fullmatch(name):
        return
    why = (f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower case'
           " alphanumeric characters, '-' or '.', and must start and end with an alphanumeric"
           " character (e.g. 'example.com', regex used for validation is"
           f" '{_DNS_SUBDOMAIN.pattern}')")
    if len(name) > _DNS_SUBDOMAIN_MAX:
        why = f"Invalid value: \"{name}\": must be no more than {_DNS_SUBDOMAIN_MAX} characters"
    cause = {"reason": "FieldValueInvalid", "message": why, "field": "metadata.name"}
    raise StoreUnprocessable(f'{kind} "{name}" is invalid: metadata.name: {why}', name=name,
                             causes=(cause,))


def validate_limits(kind: str, obj: Obj) -> None:
    """The API server's size limits, refused with its 422 message (``ValidateAnnotations`` and
    ``ValidateConfigMap`` in kubernetes/kubernetes ``pkg/apis/core/validation``)."""
    name = obj.get("metadata", {}).get("name", "")
    annotations = obj.get("metadata", {}).get("annotations") or {}
    if _total_bytes(annotations) > MAX_ANNOTATION_BYTES:
        raise _too_long(kind, name, "metadata.annotations", MAX_ANNOTATION_BYTES)
    if kind == "ConfigMap":
        size = _total_bytes(obj.get("data") or {}) + _total_bytes(obj.get("binaryData") or {})
        if size > MAX_CONFIGMAP_BYTES:
            raise _too_long(kind, name, "[]", MAX_CONFIGMAP_BYTES)


def _too_long(kind: str, name: str, field: str, limit: int) -> StoreUnprocessable:
    why = f"Too long: must have at most {limit} bytes"
    cause = {"reason": "FieldValueTooLong", "message": why, "field": field}
    return StoreUnprocessable(f'{kind} "{name}" is invalid: {field}: {why}', name=name,
                              causes=(cause,))


def _total_bytes(mapping: dict[str, Any]) -> int:
    return sum(len(str(k).encode()) + len(str(v).encode()) for k, v in mapping.items())


def _within_scope(current: Obj, updated: Obj, scope: Scope) -> Obj:
    """Keep the part of ``current`` that a write in ``scope`` may not change."""
    kept = {Scope.MAIN: "status", Scope.STATUS: "spec"}.get(scope)
    if kept is None:
        return updated
    result = {k: v for k, v in updated.items() if k != kept}
    if kept in current:
        result[kept] = current[kept]
    return result
