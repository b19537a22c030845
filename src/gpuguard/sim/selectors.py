"""Kubernetes label and field selectors, parsed and matched as the real API server does.

The simulator's API server filters lists and watches with these, so a controller that asks
for ``labelSelector=nvidia.com/gpu.present=true`` or ``fieldSelector=spec.nodeName=n1`` gets
what a real cluster would give it — including the surprising parts (``a!=b`` and ``a notin
(...)`` also match objects without the label).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuguard.errors import InputError

_KEY = r"[A-Za-z0-9](?:[-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_EXISTS = re.compile(rf"^(?P<negated>!?)\s*(?P<key>{_KEY})$")
_SET = re.compile(rf"^(?P<key>{_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_EQUALITY = re.compile(rf"^(?P<key>{_KEY})\s*(?P<op>==|=|!=)\s*(?P<value>{_VALUE})$")
_FIELD = re.compile(r"^(?P<key>[A-Za-z0-9_.]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^,]*)$")


class SelectorError(InputError):
    """A selector string does not parse; the message quotes the bad term."""


@dataclass(frozen=True)
class Requirement:
    """One term of a selector: ``key op values`` (values empty for exists / not-exists)."""

    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: frozenset[str] = frozenset()

    def matches(self, actual: str | None) -> bool:
        return _OPERATORS[self.op](actual, self.values)


_OPERATORS: dict[str, Callable[[str | None, frozenset[str]], bool]] = {
    "=": lambda actual, values: actual in values,
    "in": lambda actual, values: actual in values,
    "!=": lambda actual, values: actual not in values,
    "notin": lambda actual, values: actual not in values,
    "exists": lambda actual, _: actual is not None,
    "!": lambda actual, _: actual is None,
}


@dataclass(frozen=True)
class LabelSelector:
    """All requirements must hold (comma = AND); the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels.get(r.key)) for r in self.requirements)


@dataclass(frozen=True)
class FieldSelector:
    """Equality / inequality on dotted object paths (``spec.nodeName=n1``), ANDed."""

    requirements: tuple[Requirement, ...] = ()

    @property
    def keys(self) -> frozenset[str]:
        return frozenset(r.key for r in self.requirements)

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all(r.matches(field_value(obj, r.key)) for r in self.requirements)


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse ``a=b,c!=d,e in (x,y),f notin (z),g,!h``; raise SelectorError on a bad term."""
    terms = _split_top_level(text or "")
    return LabelSelector(tuple(_parse_label_term(t) for t in terms))


def parse_field_selector(text: str | None) -> FieldSelector:
    """Parse ``metadata.name=n1,status.phase!=Succeeded``; raise SelectorError on a bad term."""
    terms = [t.strip() for t in (text or "").split(",") if t.strip()]
    return FieldSelector(tuple(_parse_field_term(t) for t in terms))


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string a field selector compares with: missing → "", booleans → "true"/"false"."""
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside ``( )``."""
    terms: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    terms.append("".join(current))
    stripped = [t.strip() for t in terms]
    if depth != 0 or (text.strip() and not all(stripped)):
        raise SelectorError(f"label selector {text!r}: unbalanced parentheses or empty term")
    return [t for t in stripped if t]


def _parse_label_term(term: str) -> Requirement:
    if m := _EXISTS.match(term):
        return Requirement(m["key"], "!" if m["negated"] else "exists")
    if m := _SET.match(term):
        values = frozenset(v.strip() for v in m["values"].split(",") if v.strip())
        if not values:
            raise SelectorError(f"label selector term {term!r}: empty value set")
        return Requirement(m["key"], m["op"], values)
    if m := _EQUALITY.match(term):
        return Requirement(m["key"], "!=" if m["op"] == "!=" else "=", frozenset({m["value"]}))
    raise SelectorError(f"label selector term {term!r} does not parse")


def _parse_field_term(term: str) -> Requirement:
    m = _FIELD.match(term)
    if m is None:
        raise SelectorError(f"field selector term {term!r} does not parse")
    op = "!=" if m["op"] == "!=" else "="
    return Requirement(m["key"], op, frozenset({m["value"].strip()}))
