"""``metadata.managedFields`` as the API server records them for Update operations.

Every write (create, update, merge patch) is an ``Update`` operation of one field manager:
the ``fieldManager`` query parameter, else the client's user agent up to its first ``/``
(kubectl's is ``kubectl-annotate``, ``kubectl-cordon``...). The manager takes ownership of
every field it set or changed, and of a map it created (``"."``); a field it changed is
removed from every other manager's set, and a removed field is owned by nobody. Fields it
wrote with their current value keep their owners. A write to ``/status`` is its manager's
entry with ``subresource: status`` and owns only status; any other owns all but status.
Ownership is kept per field in ``fieldsV1``'s nested ``f:<name>`` form; a manager that owns
nothing is dropped. See https://kubernetes.io/docs/reference/using-api/server-side-apply/
("Field management", "Conflicts" for Update operations). Not modelled: associative lists
(``listType=map``, owned item by item as ``k:{...}`` there; whole lists here) and Apply
operations (server-side apply is not served: see docs/design.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

Obj = dict[str, Any]
Path = tuple[str, ...]
SERVER_OWNED = {"managedFields", "resourceVersion", "uid", "creationTimestamp", "generation",
                "name", "namespace"}  # fmt: skip
STATUS = "status"  # the subresource whose writes own status (and only status)
_MAP = object()  # a map's own node in a field set (``.`` in ``fieldsV1``)
_NOT_TRACKED = ("apiVersion", "kind")


def manager_of(query: dict[str, str], user_agent: str | None) -> str:
    """The field manager of a request: ``fieldManager``, else the user agent's name."""
    return query.get("fieldManager") or (user_agent or "unknown").split("/", 1)[0]


def record(before: Obj | None, after: Obj, manager: str, api_version: str, at: str, *,
           subresource: str = "") -> None:
    """Update ``after``'s ``metadata.managedFields`` for ``manager``'s write over ``before``
    (``subresource`` "status": a write to ``/status``, which owns status fields only; any
    other write owns every field but status). As structured-merge-diff's ``Updater.Update``:
    the fields the write added or changed move to its manager, and every other manager loses
    those and the ones it removed; a map the write created is owned too (``.``)."""
    old = dict(_nodes(before or _zero(after), subresource))
    new = dict(_nodes(after, subresource))
    changed = {p for p, v in new.items() if old.get(p, _MISSING) != v}
    removed = set(old) - set(new)
    entries = (before or {}).get("metadata", {}).get("managedFields", [])
    owned = _owned(entries)
    for paths in owned.values():
        paths.difference_update(changed | removed)
    owned.setdefault((manager, subresource), set()).update(changed)
    times = {(e["manager"], e.get("subresource", "")): e.get("time", at) for e in entries}
    times[(manager, subresource)] = at
    after.setdefault("metadata", {})["managedFields"] = [
        _entry(name, sub, api_version, times[(name, sub)], paths)
        for (name, sub), paths in owned.items() if paths
    ]  # fmt: skip


def _zero(created: Obj) -> Obj:
    """What a create is compared with: the kind's zero value, whose ``spec`` and ``status``
    (Go structs, not maps) are there though empty, so a creator owns what it set in them,
    not the structs themselves."""
    return {top: {} for top in ("spec", "status") if isinstance(created.get(top), dict)}


def _entry(manager: str, subresource: str, api_version: str, at: str, paths: set[Path]) -> Obj:
    entry = {"manager": manager, "operation": "Update", "apiVersion": api_version, "time": at,
             "fieldsType": "FieldsV1", "fieldsV1": _fields_v1(paths)}
    if subresource:
        entry["subresource"] = subresource
    return entry


def owners(obj: Obj, path: Path) -> set[str]:
    """The managers owning the field at ``path`` (e.g. ``("metadata", "annotations", key)``)."""
    return {name for (name, _), paths in
            _owned(obj.get("metadata", {}).get("managedFields", [])).items()
            if path in paths}  # fmt: skip


_MISSING = object()


def _nodes(obj: Obj, subresource: str) -> Iterator[tuple[Path, Any]]:
    """Every field a write in ``subresource`` may own, maps as ``_MAP`` (lists are atomic)."""
    for top, value in obj.items():
        if top in _NOT_TRACKED or (top == STATUS) != (subresource == STATUS):
            continue
        if top == "metadata":
            for key, inner in (value or {}).items():
                if key not in SERVER_OWNED:
                    yield from _walk(inner, ("metadata", key))
        else:
            yield from _walk(value, (top,))


def _walk(value: Any, path: Path) -> Iterator[tuple[Path, Any]]:
    if isinstance(value, dict):
        yield path, _MAP
        for key, inner in value.items():
            yield from _walk(inner, (*path, key))
    else:
        yield path, value


def _owned(entries: list[Obj]) -> dict[tuple[str, str], set[Path]]:
    owned: dict[tuple[str, str], set[Path]] = {}
    for entry in entries:
        key = (entry["manager"], entry.get("subresource", ""))
        owned.setdefault(key, set()).update(_paths(entry.get("fieldsV1", {}), ()))
    return owned


def _paths(tree: Obj, prefix: Path) -> Iterator[Path]:
    if not tree and prefix:
        yield prefix
    for key, inner in tree.items():
        if key == "." and prefix:
            yield prefix
        elif key.startswith("f:"):
            yield from _paths(inner, (*prefix, key[2:]))


def _fields_v1(paths: set[Path]) -> Obj:
    """``fieldsV1``: ``f:<name>`` per field; ``{}`` for an owned field without owned
    children, ``"."`` beside the children of one that is owned itself."""
    tree: Obj = {}
    for path in sorted(paths):
        node = tree
        for part in path:
            node = node.setdefault(f"f:{part}", {})
    for path in paths:
        node = tree
        for part in path:
            node = node[f"f:{part}"]
        if node:
            node["."] = {}
    return _sorted(tree)


def _sorted(tree: Obj) -> Obj:
    """``.`` first, then the fields by name, as the API server serializes a field set."""
    return {key: _sorted(tree[key]) for key in sorted(tree, key=lambda k: (k != ".", k))}
