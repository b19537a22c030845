"""Strategic merge patch (``application/strategic-merge-patch+json``) as the API server applies it.

A JSON merge patch (RFC 7386) replaces a list whole; a strategic merge patch merges a list
whose Go field carries ``patchStrategy:"merge"`` item by item, matched on its
``patchMergeKey`` — which is how node-problem-detector and gpuguard's agent set their own
Node conditions without wiping the kubelet's, and how the kubelet updates its own
(https://kubernetes.io/docs/tasks/manage-kubernetes-objects/update-api-object-kubectl-patch/,
"Notes on the strategic merge patch"; kubernetes ``apimachinery/pkg/util/strategicpatch``).

The merge keys below are the ``patchStrategy``/``patchMergeKey`` struct tags of the kinds the
simulator serves (kubernetes ``staging/src/k8s.io/api/core/v1/types.go``, ``batch/v1/types.go``,
``apimachinery/pkg/apis/meta/v1/types.go``); a list not named here is replaced, as there.
Directives understood: ``$patch: delete`` on a list item (remove the item with that key),
``$patch: replace`` on a map or as a list item (replace it whole), ``$patch: delete`` on a
map (remove it), ``$deleteFromPrimitiveList/<field>`` and ``$setElementOrder/<field>``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from gpuguard import errors

Path = tuple[str, ...]
PRIMITIVE = ""  # a merged list of strings (``finalizers``): a set union, order kept

_DIRECTIVE = "$patch"
_DELETE_FROM = "$deleteFromPrimitiveList/"
_ORDER = "$setElementOrder/"

# ObjectMeta: ``Finalizers ... patchStrategy:"merge"``, ``OwnerReferences ... patchMergeKey:"uid"``
_META: dict[Path, str] = {("metadata", "finalizers"): PRIMITIVE,
                          ("metadata", "ownerReferences"): "uid"}
# Container: ``Ports`` by containerPort, ``Env``/``EnvFrom``... by name, ``VolumeMounts`` by
# mountPath, ``VolumeDevices`` by devicePath.
_CONTAINER: dict[Path, str] = {("ports",): "containerPort", ("env",): "name",
                               ("volumeMounts",): "mountPath", ("volumeDevices",): "devicePath"}


def _pod_spec(prefix: Path) -> dict[Path, str]:
    """PodSpec: containers, initContainers, ephemeralContainers, volumes, imagePullSecrets
    by ``name``; hostAliases by ``ip``."""
    keys = {(*prefix, field): "name" for field in
            ("containers", "initContainers", "ephemeralContainers", "volumes",
             "imagePullSecrets")}
    keys[(*prefix, "hostAliases")] = "ip"
    for field in ("containers", "initContainers", "ephemeralContainers"):
        keys.update({(*prefix, field, *sub): key for sub, key in _CONTAINER.items()})
    return keys


MERGE_KEYS: dict[str, dict[Path, str]] = {
    # NodeStatus: ``Conditions []NodeCondition ... patchStrategy:"merge" patchMergeKey:"type"``,
    # ``Addresses []NodeAddress ... patchStrategy:"merge" patchMergeKey:"type"``; NodeSpec:
    # ``PodCIDRs []string ... patchStrategy:"merge"`` (``Taints`` has no strategy: replaced).
    "Node": {("status", "conditions"): "type", ("status", "addresses"): "type",
             ("spec", "podCIDRs"): PRIMITIVE},
    # PodStatus: ``Conditions ... patchMergeKey:"type"``, ``PodIPs``/``HostIPs`` by ``ip``
    # (``ContainerStatuses`` has no strategy: replaced).
    "Pod": {("status", "conditions"): "type", ("status", "podIPs"): "ip",
            ("status", "hostIPs"): "ip", **_pod_spec(("spec",))},
    # JobStatus: ``Conditions []JobCondition ... patchStrategy:"merge" patchMergeKey:"type"``.
    "Job": {("status", "conditions"): "type", **_pod_spec(("spec", "template", "spec"))},
}


class PatchInvalid(errors.InputError):
    """The patch breaks a strategic-merge rule (a list item without its merge key...)."""


def merge_keys(kind: str) -> dict[Path, str]:
    """``kind``'s mergeable lists (field paths, list items not counted) and their merge keys
    (``PRIMITIVE``: a set of scalars). The same lists are ``listType=map``/``set`` in the
    API's schema, which is how managedFields own their items (``sim.managed_fields``)."""
    return {**_META, **MERGE_KEYS.get(kind, {})}


def apply(kind: str, target: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """``target`` with the strategic merge ``patch`` applied (a new object; neither input
    changes). Lists that ``kind`` declares mergeable merge by key; others are replaced."""
    return _merge_map(dict(target), patch, (), merge_keys(kind))


def _merge_map(target: dict[str, Any], patch: Mapping[str, Any], path: Path,
               keys: Mapping[Path, str]) -> dict[str, Any]:
    directive = patch.get(_DIRECTIVE)
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if not k.startswith("$")}
    if directive not in (None, "merge"):
        raise PatchInvalid(f"unknown patch directive {directive!r} at {_where(path)}")
    result = dict(target)
    orders: dict[str, list[Any]] = {}
    for field, value in patch.items():
        if field.startswith(_ORDER):
            orders[field.removeprefix(_ORDER)] = list(value or [])
        elif field.startswith(_DELETE_FROM):
            name = field.removeprefix(_DELETE_FROM)
            result[name] = [v for v in result.get(name) or [] if v not in (value or [])]
        elif field.startswith("$"):
            continue  # $patch handled above; $retainKeys needs the Go schema: not modelled
        elif value is None:
            result.pop(field, None)
        else:
            merged = _merge_value(result.get(field), value, (*path, field), keys)
            if merged is _REMOVED:
                result.pop(field, None)
            else:
                result[field] = merged
    for field, order in orders.items():
        if isinstance(result.get(field), list):
            result[field] = _ordered(result[field], order, keys.get((*path, field)))
    return result


_REMOVED = object()


def _merge_value(current: Any, value: Any, path: Path, keys: Mapping[Path, str]) -> Any:
    if isinstance(value, Mapping):
        if value.get(_DIRECTIVE) == "delete":
            return _REMOVED
        return _merge_map(current if isinstance(current, dict) else {}, value, path, keys)
    if isinstance(value, list) and path in keys:
        return _merge_list(current if isinstance(current, list) else [], value, path, keys)
    return copy.deepcopy(value)


def _merge_list(current: list[Any], patch: list[Any], path: Path,
                keys: Mapping[Path, str]) -> list[Any]:
    if any(isinstance(i, Mapping) and i.get(_DIRECTIVE) == "replace" for i in patch):
        return [copy.deepcopy(i) for i in patch
                if not isinstance(i, Mapping) or _DIRECTIVE not in i]
    key = keys[path]
    if key == PRIMITIVE:
        merged = current + [copy.deepcopy(v) for v in patch if v not in current]
        return _server_order(merged, patch, current, lambda item: item)
    result = list(current)
    for item in patch:
        if not isinstance(item, Mapping) or key not in item:
            raise PatchInvalid(f"map: {item!r} does not contain declared merge key: {key}")
        at = next((i for i, old in enumerate(result)
                   if isinstance(old, Mapping) and old.get(key) == item[key]), None)
        if item.get(_DIRECTIVE) == "delete":
            result = [old for old in result
                      if not (isinstance(old, Mapping) and old.get(key) == item[key])]
        elif at is None:
            result.append(_merge_map({}, item, path, keys))
        else:
            result[at] = _merge_map(dict(result[at]), item, path, keys)
    deleted = {i.get(key) for i in patch
               if isinstance(i, Mapping) and i.get(_DIRECTIVE) == "delete"}
    kept = [i for i in current if not (isinstance(i, Mapping) and i.get(key) in deleted)]
    merged = [i for i in patch if isinstance(i, Mapping) and _DIRECTIVE not in i]
    return _server_order(result, merged, kept, lambda item: item.get(key))


def _server_order(merged: list[Any], patch: list[Any], server: list[Any],
                  identity: Any) -> list[Any]:
    """The merged list in the API server's order (``strategicpatch`` ``mergeSlice``, then
    ``normalizeElementOrder``/``mergeSortedSlice``): the patch's items in the patch's order,
    the server-only items in the server's, interleaved by their places in the server's list;
    a patch item that the server did not have goes before the server-only items left."""
    patch_ids = [identity(i) for i in patch]
    server_ids = [identity(i) for i in server]
    in_patch = sorted((m for m in merged if identity(m) in patch_ids),
                      key=lambda m: patch_ids.index(identity(m)))
    server_only = [m for m in merged if identity(m) not in patch_ids]
    ordered: list[Any] = []
    while server_only or in_patch:
        left = server_only[0] if server_only else None
        right = in_patch[0] if in_patch else None
        take_left = right is None or (left is not None and identity(left) in server_ids
                                      and identity(right) in server_ids
                                      and server_ids.index(identity(left))
                                      < server_ids.index(identity(right)))
        ordered.append((server_only if take_left else in_patch).pop(0))
    return ordered


def _ordered(items: list[Any], order: list[Any], key: str | None) -> list[Any]:
    """``$setElementOrder``: the items named in ``order`` first, in that order; the rest after,
    as they were."""
    def identity(item: Any) -> Any:
        return item.get(key) if key and isinstance(item, Mapping) else item

    wanted = [identity(o) if isinstance(o, Mapping) else o for o in order]
    rank = {w: i for i, w in enumerate(wanted) if isinstance(w, str | int)}
    return sorted(items, key=lambda item: rank.get(identity(item), len(rank)))


def _where(path: Path) -> str:
    return ".".join(path) or "the top level"
