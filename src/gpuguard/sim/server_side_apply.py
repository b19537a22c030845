"""Server-side apply (``application/apply-patch+yaml``) as the API server does it, for maps.

An applier sends the fields it wants (its *configuration*); the server merges them into the
object (maps field by field; lists and scalars whole), records exactly those fields as the
applier's ``Apply`` entry in ``managedFields``, and removes a field the applier set before
and left out now, unless another manager owns it too. Setting a field to a value other than
the one another manager set is a conflict (409, every conflicting field named) unless the
applier forces (``force=true``), which takes the fields from their owners
(https://kubernetes.io/docs/reference/using-api/server-side-apply/, "Conflicts",
"Field management"; structured-merge-diff ``Updater.Apply``). A list is applied whole here:
a real server merges and owns the items of a ``listType=map`` list one by one (gpuguard
applies none; ``sim.managed_fields`` owns such items one by one for Update writes).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from gpuguard import errors
from gpuguard.sim import managed_fields
from gpuguard.sim.managed_fields import APPLY, UPDATE, Key, Path

Obj = dict[str, Any]
_MISSING = object()


class ApplyConflict(errors.ConflictError):
    """Fields the applier would change that other managers own: (manager entry, path)."""

    def __init__(self, conflicts: list[tuple[Key, Path]]) -> None:
        super().__init__(conflicts)
        self.conflicts = conflicts


def apply(live: Obj | None, config: Obj, manager: str, *, force: bool, api_version: str,
          at: str) -> Obj:
    """The object after ``manager`` applies ``config`` to ``live`` (None: it is created),
    with its managedFields; ApplyConflict when it would take others' fields unforced."""
    applied = dict(_leaves(config))
    owned = managed_fields.owned_fields(live or {})
    previous = owned.pop((manager, APPLY, ""), set())
    conflicts = _conflicts(live or {}, applied, owned)
    if conflicts and not force:
        raise ApplyConflict(conflicts)
    for key, path in conflicts:
        owned[key].discard(path)
    result: Obj = _merged(copy.deepcopy(live or {}), config)
    still_owned = set().union(*owned.values()) if owned else set()
    for path in sorted(previous - set(applied) - still_owned, key=len, reverse=True):
        _remove(result, path)
    owned[(manager, APPLY, "")] = set(applied)
    managed_fields.write(result, owned, {(manager, APPLY, ""): at}, live, api_version)
    return result


def conflict_message(conflicts: list[tuple[Key, Path]]) -> tuple[str, list[dict[str, str]]]:
    """The API server's message and ``causes`` for ``conflicts`` (``NewApplyConflict``
    around structured-merge-diff's ``Conflicts.Error``)."""
    causes = [{"reason": "FieldManagerConflict", "message": f"conflict with {_who(key)}",
               "field": _field(path)} for key, path in conflicts]  # fmt: skip
    if len(conflicts) == 1:
        (key, path), = conflicts
        said = f"conflict with {_who(key)}: {_field(path)}"
    else:
        lines = []
        for key in dict.fromkeys(k for k, _ in conflicts):
            lines.append(f"conflicts with {_who(key)}:")
            lines += [f"- {_field(p)}" for k, p in conflicts if k == key]
        said = "\n".join(lines)
    plural = "" if len(conflicts) == 1 else "s"
    return f"Apply failed with {len(conflicts)} conflict{plural}: {said}", causes


def _who(key: Key) -> str:
    manager, operation, _ = key
    return f'"{manager}" using v1' if operation == UPDATE else f'"{manager}"'


def _field(path: Path) -> str:
    return "." + ".".join(path)


def _conflicts(live: Obj, applied: dict[Path, Any], owned: dict[Key, set[Path]]
               ) -> list[tuple[Key, Path]]:
    """Applied fields whose value would change that another (main-resource) entry owns."""
    changing = {p for p, v in applied.items() if _value(live, p) != v}
    return sorted(((key, path) for key, paths in owned.items() if not key[2]
                   for path in paths & changing), key=lambda c: (c[0], c[1]))  # fmt: skip


def _leaves(config: Obj) -> Iterator[tuple[Path, Any]]:
    """The fields a configuration sets: its leaves (a map is not owned by being applied)."""
    for path, value in managed_fields.tracked(config):
        yield from _walk(value, path)


def _walk(value: Any, path: Path) -> Iterator[tuple[Path, Any]]:
    if isinstance(value, dict) and value:
        for key, inner in value.items():
            yield from _walk(inner, (*path, key))
    else:
        yield path, value


def _value(obj: Any, path: Path) -> Any:
    for part in path:
        if not isinstance(obj, dict) or part not in obj:
            return _MISSING
        obj = obj[part]
    return obj


def _merged(live: Any, config: Any) -> Any:
    if not isinstance(live, dict) or not isinstance(config, dict):
        return config
    result = dict(live)
    for key, value in config.items():
        result[key] = _merged(live.get(key), value)
    return result


def _remove(obj: Obj, path: Path) -> None:
    parent = _value(obj, path[:-1])
    if isinstance(parent, dict):
        parent.pop(path[-1], None)
