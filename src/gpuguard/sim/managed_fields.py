"""``metadata.managedFields`` as the API server records them for Update operations.

Every write (create, update, merge patch) is an ``Update`` operation of one field manager:
the ``fieldManager`` query parameter, else the client's user agent up to its first ``/``
(kubectl's is ``kubectl-annotate``, ``kubectl-cordon``...). The manager takes ownership of
every field it set or changed, and of a map it created (``"."``); a field it changed is
removed from every other manager's set, and a removed field is owned by nobody. Fields it
wrote with their current value keep their owners. A write to ``/status`` is its manager's
entry with ``subresource: status`` and owns only status; any other owns all but status.
Ownership is kept per field in ``fieldsV1``'s nested ``f:<name>`` form; a manager that owns
nothing is dropped. The items of a mergeable list (``sim.strategic_merge.merge_keys``: the
API's ``listType=map``/``set``) are owned one by one, as ``k:{"type":"Ready"}`` and
``v:"a/b"``. See https://kubernetes.io/docs/reference/using-api/server-side-apply/ ("Field
management", "Conflicts" for Update operations). ``Apply`` entries are written by
``sim.server_side_apply``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from gpuguard.sim import strategic_merge

Obj = dict[str, Any]
Path = tuple[str, ...]
SERVER_OWNED = {"managedFields", "resourceVersion", "uid", "creationTimestamp", "generation",
                "name", "namespace"}  # fmt: skip
STATUS = "status"  # the subresource whose writes own status (and only status)
_MAP = object()  # a map's own node in a field set (``.`` in ``fieldsV1``)
_ITEM = "\x00"  # marks a path part that is a list item (``k:{...}``/``v:...``), not a field
_NOT_TRACKED = ("apiVersion", "kind")


def manager_of(query: dict[str, str], user_agent: str | None) -> str:
    """The field manager of a request: ``fieldManager``, else the user agent's name."""
    return query.get("fieldManager") or (user_agent or "unknown").split("/", 1)[0]


Key = tuple[str, str, str]  # (manager, operation, subresource): one managedFields entry
UPDATE, APPLY = "Update", "Apply"


def record(before: Obj | None, after: Obj, manager: str, api_version: str, at: str, *,
           subresource: str = "", kind: str = "") -> None:
    """Update ``after``'s ``metadata.managedFields`` for ``manager``'s write over ``before``
    (``subresource`` "status": a write to ``/status``, which owns status fields only; any
    other write owns every field but status). As structured-merge-diff's ``Updater.Update``:
    the fields the write added or changed move to its manager, and every other manager loses
    those and the ones it removed; a map the write created is owned too (``.``). ``kind``'s
    mergeable lists are owned item by item (``k:{"type":"Ready"}``, ``v:"a/b"``)."""
    keys = strategic_merge.merge_keys(kind)
    old = dict(_nodes(before or _zero(after), subresource, keys))
    new = dict(_nodes(after, subresource, keys))
    changed = {p for p, v in new.items() if old.get(p, _MISSING) != v}
    removed = set(old) - set(new)
    owned = owned_fields(before or {})
    for paths in owned.values():
        paths.difference_update(changed | removed)
    owned.setdefault((manager, UPDATE, subresource), set()).update(changed)
    write(after, owned, {(manager, UPDATE, subresource): at}, before, api_version)


def owned_fields(obj: Obj) -> dict[Key, set[Path]]:
    """Each managedFields entry's fields (a map's own ``.`` as the map's path)."""
    owned: dict[Key, set[Path]] = {}
    for entry in obj.get("metadata", {}).get("managedFields", []):
        owned.setdefault(_key(entry), set()).update(_paths(entry.get("fieldsV1", {}), ()))
    return owned


def write(after: Obj, owned: dict[Key, set[Path]], stamped: dict[Key, str],
          before: Obj | None, api_version: str) -> None:
    """Set ``after``'s managedFields to ``owned`` (entries that own nothing dropped), each
    entry's time from ``stamped`` (the writers now) or as it was in ``before``."""
    entries = (before or {}).get("metadata", {}).get("managedFields", [])
    times = {_key(e): e.get("time", "") for e in entries} | stamped
    after.setdefault("metadata", {})["managedFields"] = [
        _entry(key, api_version, times.get(key, ""), paths)
        for key, paths in owned.items() if paths
    ]  # fmt: skip


def _key(entry: Obj) -> Key:
    return entry["manager"], entry.get("operation", UPDATE), entry.get("subresource", "")


def _zero(created: Obj) -> Obj:
    """What a create is compared with: the kind's zero value, whose ``spec`` and ``status``
    (Go structs, not maps) are there though empty, so a creator owns what it set in them,
    not the structs themselves."""
    return {top: {} for top in ("spec", "status") if isinstance(created.get(top), dict)}


def _entry(key: Key, api_version: str, at: str, paths: set[Path]) -> Obj:
    manager, operation, subresource = key
    entry = {"manager": manager, "operation": operation, "apiVersion": api_version, "time": at,
             "fieldsType": "FieldsV1", "fieldsV1": _fields_v1(paths)}
    if subresource:
        entry["subresource"] = subresource
    return entry


def owners(obj: Obj, path: Path) -> set[str]:
    """The managers owning the field at ``path`` (e.g. ``("metadata", "annotations", key)``)."""
    return {manager for (manager, _, _), paths in owned_fields(obj).items() if path in paths}


_MISSING = object()


def tracked(obj: Obj, subresource: str = "") -> Iterator[tuple[Path, Any]]:
    """The top-level (and metadata) fields a write in ``subresource`` may own, with their
    values: all but apiVersion, kind and the server's metadata; status only in ``/status``."""
    for top, value in obj.items():
        if top in _NOT_TRACKED or (top == STATUS) != (subresource == STATUS):
            continue
        if top == "metadata":
            yield from ((("metadata", key), inner) for key, inner in (value or {}).items()
                        if key not in SERVER_OWNED)  # fmt: skip
        else:
            yield (top,), value


def _nodes(obj: Obj, subresource: str, keys: dict[Path, str]) -> Iterator[tuple[Path, Any]]:
    """Every field a write in ``subresource`` may own, maps and keyed lists as ``_MAP``, their
    items by key (other lists are atomic: one field)."""
    for path, value in tracked(obj, subresource):
        yield from _walk(value, path, keys)


def _walk(value: Any, path: Path, keys: dict[Path, str]) -> Iterator[tuple[Path, Any]]:
    key = keys.get(tuple(p for p in path if not p.startswith(_ITEM)))
    if isinstance(value, dict):
        yield path, _MAP
        for name, inner in value.items():
            yield from _walk(inner, (*path, name), keys)
    elif isinstance(value, list) and key is not None:
        yield path, _MAP
        for item in value:
            if key == strategic_merge.PRIMITIVE:
                yield (*path, f"{_ITEM}v:{_json(item)}"), item
            elif isinstance(item, dict) and key in item:
                yield from _walk(item, (*path, f"{_ITEM}k:{_json({key: item[key]})}"), keys)
    else:
        yield path, value


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _paths(tree: Obj, prefix: Path) -> Iterator[Path]:
    if not tree and prefix:
        yield prefix
    for key, inner in tree.items():
        if key == "." and prefix:
            yield prefix
        elif key.startswith("f:"):
            yield from _paths(inner, (*prefix, key[2:]))
        elif key.startswith(("k:", "v:")):
            yield from _paths(inner, (*prefix, _ITEM + key))


def _fields_v1(paths: set[Path]) -> Obj:
    """``fieldsV1``: ``f:<name>`` per field; ``{}`` for an owned field without owned
    children, ``"."`` beside the children of one that is owned itself."""
    tree: Obj = {}
    for path in sorted(paths):
        node = tree
        for part in path:
            node = node.setdefault(_member(part), {})
    for path in paths:
        node = tree
        for part in path:
            node = node[_member(part)]
        if node:
            node["."] = {}
    return _sorted(tree)


def _member(part: str) -> str:
    """A path part as ``fieldsV1`` names it: ``f:<field>``, or a list item's ``k:``/``v:``."""
    return part.removeprefix(_ITEM) if part.startswith(_ITEM) else f"f:{part}"


def _sorted(tree: Obj) -> Obj:
    """``.`` first, then the fields by name, as the API server serializes a field set."""
    return {key: _sorted(tree[key]) for key in sorted(tree, key=lambda k: (k != ".", k))}
