"""JSON patch (RFC 6902, ``application/json-patch+json``) as the API server applies it.

A list of operations (``add``, ``remove``, ``replace``, ``move``, ``copy``, ``test``) on
JSON pointers (RFC 6901: ``/metadata/labels/a~1b`` is the label ``a/b``), applied in order
to a copy; any that fails (a missing path, a ``test`` that does not hold) refuses the whole
patch, which the API server answers with 422 (kubernetes apiserver ``endpoints/handlers/
patch.go``, through ``evanphx/json-patch``). ``kubectl patch --type=json`` sends these.
"""

from __future__ import annotations

import copy
from typing import Any

from gpuguard import errors

_APPEND = "-"


class PatchFailed(errors.InputError):
    """An operation that cannot be applied: the patch changes nothing."""


def apply(document: dict[str, Any], operations: Any) -> dict[str, Any]:
    """``document`` with ``operations`` applied (a new object; the input does not change)."""
    if not isinstance(operations, list):
        raise PatchFailed("a JSON patch is a list of operations")
    result = copy.deepcopy(document)
    for index, operation in enumerate(operations):
        if not isinstance(operation, dict) or not isinstance(operation.get("path"), str):
            raise PatchFailed(f"operation {index} is not an object with a path")
        result = _apply_one(result, operation)
    return result


def _apply_one(doc: Any, op: dict[str, Any]) -> Any:
    kind, path = op.get("op"), op["path"]
    if kind == "test":
        if _get(doc, path) != op.get("value"):
            raise PatchFailed(f"test failed at {path}")
        return doc
    if kind in ("move", "copy"):
        source = op.get("from")
        if not isinstance(source, str):
            raise PatchFailed(f"{kind} needs a from path")
        value = copy.deepcopy(_get(doc, source))
        if kind == "move":
            doc = _remove(doc, source)
        return _add(doc, path, value)
    if "value" not in op and kind in ("add", "replace"):
        raise PatchFailed(f"{kind} at {path} needs a value")
    if kind == "add":
        return _add(doc, path, copy.deepcopy(op["value"]))
    if kind == "remove":
        return _remove(doc, path)
    if kind == "replace":
        _get(doc, path)  # the target must exist
        return _add(_remove(doc, path), path, copy.deepcopy(op["value"]))
    raise PatchFailed(f"unknown operation {kind!r}")


def _tokens(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchFailed(f"{path!r} is not a JSON pointer")
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _get(doc: Any, path: str) -> Any:
    for token in _tokens(path):
        doc = _child(doc, token, path)
    return doc


def _child(node: Any, token: str, path: str) -> Any:
    if isinstance(node, dict) and token in node:
        return node[token]
    if isinstance(node, list) and token.isdigit() and int(token) < len(node):
        return node[int(token)]
    raise PatchFailed(f"{path}: no such member")


def _parent(doc: Any, path: str) -> tuple[Any, str]:
    tokens = _tokens(path)
    if not tokens:
        raise PatchFailed("the whole document cannot be patched here")
    node = doc
    for token in tokens[:-1]:
        node = _child(node, token, path)
    return node, tokens[-1]


def _add(doc: Any, path: str, value: Any) -> Any:
    parent, last = _parent(doc, path)
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list) and last == _APPEND:
        parent.append(value)
    elif isinstance(parent, list) and last.isdigit() and int(last) <= len(parent):
        parent.insert(int(last), value)
    else:
        raise PatchFailed(f"{path}: cannot add here")
    return doc


def _remove(doc: Any, path: str) -> Any:
    parent, last = _parent(doc, path)
    _child(parent, last, path)  # must exist
    if isinstance(parent, dict):
        del parent[last]
    else:
        del parent[int(last)]
    return doc
