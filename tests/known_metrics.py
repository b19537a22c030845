"""What metrics exist, for tests that check a PromQL expression reads only real series: the
names every gpuguard, dcgm-exporter and kube-state-metrics exporter emits (gpuguard's constants
and the reference data in ``tests/data/reference``), and the names an expression selects."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from gpuguard.model import metric_names

REFERENCE = Path(__file__).resolve().parent / "data" / "reference"

_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_VARIABLE = re.compile(r"\$\{?\w+\}?")  # Grafana: $node, ${datasource}, $__range
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_NUMBER = re.compile(r"(?<![\w:])\d[\w.]*")  # 0.95, 1e3, and durations: 10m, 24h, 1h30m
_IDENT = re.compile(r"[A-Za-z_:][\w:]*")
_KEYWORDS = frozenset(
    {
        "and",
        "or",
        "unless",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "offset",
        "bool",
        "inf",
        "nan",
        "Inf",
        "NaN",
    }
)


def metric_names_in(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (functions, keywords, labels, literals dropped)."""
    text = _STRING.sub(" ", expr)
    text = _VARIABLE.sub(" ", text)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    text = _NUMBER.sub(" ", text)
    names = set()
    for match in _IDENT.finditer(text):
        word = match.group(0)
        follows = text[match.end() :].lstrip()[:1]
        if word in _KEYWORDS or follows == "(":
            continue
        names.add(word)
    return names


def _constant_metric_names() -> set[str]:
    values = (
        v
        for k, v in vars(metric_names).items()
        if k.isupper() and not k.endswith("_LABEL") and isinstance(v, str)
    )
    return {v for v in values if re.fullmatch(r"[A-Za-z_:][\w:]*", v)}


def _dcgm_exporter_names() -> set[str]:
    text = (REFERENCE / "dcgm_exporter_counters.md").read_text(encoding="utf-8")
    rows = (
        line for line in text.splitlines() if line.startswith("|") and "does not exist" not in line
    )
    return {name for row in rows for name in re.findall(r"\b(DCGM_(?:FI|EXP)_[A-Z0-9_]+)\b", row)}


def _kube_state_metrics_names() -> set[str]:
    names = set()
    for line in (REFERENCE / "kube_state_metrics_sample.txt").read_text().splitlines():
        if line.startswith(("# HELP ", "# TYPE ")):
            names.add(line.split()[2])
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return names


@cache
def known_metrics() -> frozenset[str]:
    """Every metric gpuguard, dcgm-exporter or kube-state-metrics emits, as far as we know."""
    return frozenset(
        _constant_metric_names() | _dcgm_exporter_names() | _kube_state_metrics_names()
    )
