"""Prometheus text exposition (format 0.0.4) of the simulated exporters' metric families.

The shared vocabulary of ``sim.dcgm`` and ``sim.ksm``: a family is a HELP/TYPE header and its
samples; ``to_text`` renders families the way the real exporters print them (integers without a
decimal point, escaped label values), so Prometheus scrapes the simulator like a real cluster.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Sample:
    labels: Labels
    value: float


@dataclass(frozen=True)
class Family:
    """One metric family: the HELP/TYPE header and its samples (all named ``name``)."""

    name: str
    kind: str  # "gauge" or "counter" (as the real exporter declares it)
    help: str
    samples: tuple[Sample, ...]


def to_text(families: Iterable[Family]) -> str:
    """Prometheus text exposition 0.0.4: ``# HELP``, ``# TYPE``, then the samples."""
    lines: list[str] = []
    for f in families:
        lines.append(f"# HELP {f.name} {escape_help(f.help)}")
        lines.append(f"# TYPE {f.name} {f.kind}")
        lines.extend(f"{f.name}{format_labels(s.labels)} {format_value(s.value)}"
                     for s in f.samples)  # fmt: skip
    return "\n".join(lines) + "\n" if lines else ""


def format_labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{escape_label(v)}"' for k, v in labels) + "}"


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    """Integers without a decimal point (as the exporters print them), else Python's repr."""
    if math.isfinite(value) and float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))
