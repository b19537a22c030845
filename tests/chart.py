"""The Helm chart rendered with its default values by a small renderer that understands
exactly the template constructs the chart uses (helm itself is not installed here): values,
``default``, ``quote``, ``sha256sum``, ``toYaml | nindent``, a string's ``nindent``, ``{{-``
trimming, comments, (nested) ``if``/``else`` blocks and ``range`` over a list of strings
(no ``if`` inside; ``.`` is the item, ``$.`` the root, and ``. | replace "a" "b" | quote``)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parents[1] / "deploy" / "helm" / "gpuguard"
NAMESPACE = "gpuguard"


def _lookup(values: dict[str, Any], path: str) -> Any:
    node: Any = {
        "Values": values,
        "Release": {"Namespace": NAMESPACE, "Name": "gpuguard"},
        "Chart": yaml.safe_load((CHART / "Chart.yaml").read_text()),
    }
    for part in path.strip(".").split("."):
        node = node[{"AppVersion": "appVersion"}.get(part, part)]
    return node


def _expression(expr: str, values: dict[str, Any]) -> str:
    expr = expr.strip()
    if m := re.fullmatch(r"toYaml (\S+) \| nindent (\d+)", expr):
        dumped = yaml.safe_dump(_lookup(values, m[1]), sort_keys=False).rstrip("\n")
        pad = " " * int(m[2])
        return "\n" + "\n".join(pad + line for line in dumped.splitlines())
    if m := re.fullmatch(r"(\S+) \| nindent (\d+)", expr):  # a string, e.g. a file's text
        pad = " " * int(m[2])
        return "\n" + "\n".join(pad + line for line in str(_lookup(values, m[1])).split("\n"))
    if m := re.fullmatch(r"(\S+) \| sha256sum", expr):
        return hashlib.sha256(str(_lookup(values, m[1])).encode()).hexdigest()
    if m := re.fullmatch(r"(\S+) \| default (\S+)", expr):
        return str(_lookup(values, m[1]) or _lookup(values, m[2]))
    if m := re.fullmatch(r"(\S+) \| quote", expr):
        return f'"{_lookup(values, m[1])}"'
    return str(_lookup(values, expr))


def _range(body: str, items: list[str]) -> str:
    """A range's body once per item, with its item's expressions rendered (``$.`` becomes
    the root for the later passes)."""

    def item(value: str, expr: str) -> str:
        if not expr.startswith("."):
            return "{{ " + expr.removeprefix("$") + " }}"
        for old, new in re.findall(r'\| replace "(.*?)" "(.*?)"', expr):
            value = value.replace(old, new)
        return f'"{value}"' if expr.endswith("| quote") else value

    return "".join(
        re.sub(r"\{\{ (\S.*?) \}\}", lambda m, v=str(v): item(v, m[1]), body) for v in items
    )


def render(name: str, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The objects of one template; ``values`` default to the chart's values.yaml."""
    values = defaults() if values is None else values
    text = (CHART / "templates" / name).read_text()
    text = re.sub(r"\{\{-? /\*.*?\*/ -?\}\}\n?", "", text, flags=re.S)
    text = re.sub(r"\{\{- range (\S+) \}\}\n(.*?)\{\{- end \}\}\n?",
                  lambda m: _range(m[2], _lookup(values, m[1])), text, flags=re.S)

    def conditional(m: re.Match[str]) -> str:
        return m[2] if _lookup(values, m[1]) else (m[4] or "")

    innermost = re.compile(  # an if block with no if inside: rendered first, then its parent
        r"\{\{- if (\S+) \}\}\n((?:(?!\{\{- if ).)*?)"
        r"(\{\{- else \}\}\n((?:(?!\{\{- if ).)*?))?\{\{- end \}\}\n?",
        flags=re.S,
    )
    while (rendered := innermost.sub(conditional, text)) != text:
        text = rendered
    # ``{{-`` trims the whitespace before it, as Helm does (``key: |`` then ``{{- x | nindent``)
    text = re.sub(r"(?:\s*\{\{- |\{\{ )(.*?) -?\}\}", lambda m: _expression(m[1], values), text)
    assert "{{" not in text, f"{name}: an unrendered template expression is left"
    return [doc for doc in yaml.safe_load_all(text) if doc]


def defaults() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return values


XID_OVERRIDES = "# ours\nclasses:\n  13: hardware\n  48: user\n"


def with_xid_overrides(text: str = XID_OVERRIDES) -> dict[str, Any]:
    """The default values with a cluster's Xid class override file (``xidOverrides``)."""
    values = defaults()
    values["xidOverrides"] = text
    return values


def all_objects(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every object but the PrometheusRule (generated; tested in test_rules.py)."""
    return [
        obj
        for path in sorted((CHART / "templates").glob("*.yaml"))
        if path.name != "prometheusrule.yaml"
        for obj in render(path.name, values)
    ]


def by_kind(kind: str, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return [o for o in all_objects(values) if o["kind"] == kind]


def by_name(kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in by_kind(kind) if o["metadata"]["name"] == name]
    return found
