"""``metadata.managedFields`` as the API server records them for Update operations.

Every write (create, update, merge patch) is an ``Update`` operation of one field manager:
the ``fieldManager`` query parameter, else the client's user agent up to its first ``/``
(kubectl's is ``kubectl-annotate``, ``kubectl-cordon``...). The manager takes ownership of
every field it set or changed; a field it changed is removed from every other manager's set,
and a removed field is owned by nobody. Fields it wrote with their current value keep their
owners. Ownership is kept per field in ``fieldsV1``'s nested ``f:<name>`` form; a manager
that owns nothing is dropped. See https://kubernetes.io/docs/reference/using-api/server-side-apply/
("Field management", "Conflicts" for Update operations).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

Obj = dict[str, Any]
Path = tuple[str, ...]
SERVER_OWNED = {"managedFields", "resourceVersion", "uid", "creationTimestamp", "generation",
                "name", "namespace"}  # fmt: skip
TRACKED = ("metadata", "spec")  # status belongs to its writers' own subresource


def manager_of(query: dict[str, str], user_agent: str | None) -> str:
    """The field manager of a request: ``fieldManager``, else the user agent's name."""
    return query.get("fieldManager") or (user_agent or "unknown").split("/", 1)[0]


def record(before: Obj | None, after: Obj, manager: str, api_version: str, at: str) -> None:
    """Update ``after``'s ``metadata.managedFields`` for ``manager``'s write over ``before``."""
    old_leaves = dict(_leaves(before or {}))
    new_leaves = dict(_leaves(after))
    changed = {p for p, v in new_leaves.items() if old_leaves.get(p, _MISSING) != v}
    removed = set(old_leaves) - set(new_leaves)
    owned = _owned((before or {}).get("metadata", {}).get("managedFields", []))
    for fields in owned.values():
        fields.difference_update(changed | removed)
    owned.setdefault(manager, set()).update(changed)
    times = {e["manager"]: e.get("time", at) for e in (before or {}).get("metadata", {})
             .get("managedFields", [])}  # fmt: skip
    times[manager] = at
    after.setdefault("metadata", {})["managedFields"] = [
        {"manager": name, "operation": "Update", "apiVersion": api_version, "time": times[name],
         "fieldsType": "FieldsV1", "fieldsV1": _fields_v1(paths)}
        for name, paths in owned.items() if paths
    ]  # fmt: skip


def owners(obj: Obj, path: Path) -> set[str]:
    """The managers owning the field at ``path`` (e.g. ``("metadata", "annotations", key)``)."""
    return {name for name, paths in _owned(obj.get("metadata", {}).get("managedFields", [])).items()
            if path in paths}  # fmt: skip


_MISSING = object()


def _leaves(obj: Obj) -> Iterator[tuple[Path, Any]]:
    for top in TRACKED:
        yield from _walk(obj.get(top), (top,))


def _walk(value: Any, path: Path) -> Iterator[tuple[Path, Any]]:
    if isinstance(value, dict) and value:
        for key, inner in value.items():
            if path == ("metadata",) and key in SERVER_OWNED:
                continue
            yield from _walk(inner, (*path, key))
    else:
        yield path, value


def _owned(entries: list[Obj]) -> dict[str, set[Path]]:
    owned: dict[str, set[Path]] = {}
    for entry in entries:
        owned.setdefault(entry["manager"], set()).update(_paths(entry.get("fieldsV1", {}), ()))
    return owned


def _paths(tree: Obj, prefix: Path) -> Iterator[Path]:
    if not tree:
        yield prefix
    for key, inner in tree.items():
        if key.startswith("f:"):
            yield from _paths(inner, (*prefix, key[2:]))


def _fields_v1(paths: set[Path]) -> Obj:
    tree: Obj = {}
    for path in sorted(paths):
        node = tree
        for part in path:
            node = node.setdefault(f"f:{part}", {})
    return tree
