"""Replay the isolation policy over recorded Prometheus history, acting on nothing.

"Would this policy have caught last month's incidents, and how many false cordons?" Node
state comes from kube-state-metrics at each instant (the Kubernetes API cannot say what a
node looked like last month); a node the replay isolates stays isolated (with gpuguard's
annotations) for the rest of the replay, so it counts toward the breaker and is not
isolated twice. A node cordoned in history counts as a human cordon — unless kube-state-metrics
exported gpuguard's annotations with it (``kube_node_annotations``, allow-listed) and they
carry gpuguard's isolation mark: that cordon was the guard's own, which the replay decides
for itself, so it replays as not cordoned (else the replay would read the live guard's cordon
at the instant it isolates as a person's, and never isolate a hold-window case). The marks
people write (``annotation_keys.FOR_PEOPLE``, e.g. a hold while a card is on order) are read
from the exported annotations too: the breaker does not count a node held for a person
(docs/design.md#circuit-breaker). Instants without usable data are counted, never guessed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from gpuguard.errors import SourceError
from gpuguard.model import annotation_keys, decisions, fleet, withheld
from gpuguard.model import metric_names as names
from gpuguard.model import settings as settings_model
from gpuguard.policy import isolate, xid_signals


@dataclass(frozen=True)
class WouldIsolate:
    at: datetime
    node: str
    reason: decisions.Reason
    fault: str
    detail: str
    evidence: tuple[str, ...]


@dataclass
class BacktestReport:
    instants: int = 0
    undecided: int = 0
    first_error: str | None = None
    isolations: list[WouldIsolate] = field(default_factory=list)
    findings: Counter[str] = field(default_factory=Counter)


def nodes_at(samples: Iterable[fleet.MetricSample]) -> dict[str, fleet.Node]:
    """Nodes as kube-state-metrics saw them: GPU capacity, allocatable, cordon."""
    facts: dict[str, dict[str, float]] = {}
    ours: set[str] = set()  # cordoned by gpuguard: its isolation mark was exported with them
    people: dict[str, dict[str, str]] = {}  # the marks people wrote, as exported
    for sample in samples:
        node = sample.labels.get("node")
        if node and sample.name in _NODE_FACTS:
            facts.setdefault(node, {})[sample.name] = sample.value
        if node and sample.name == names.KSM_NODE_ANNOTATIONS:
            if sample.labels.get(_OUR_MARK):
                ours.add(node)
            people[node] = {
                key: sample.labels[label]
                for key, label in _PEOPLES_MARKS.items()
                if sample.labels.get(label)
            }
    return {
        name: fleet.Node(
            name=name,
            boot_id="",
            gpu_capacity=int(f.get(names.KSM_NODE_CAPACITY, 0)),
            gpu_allocatable=int(f.get(names.KSM_NODE_ALLOCATABLE, 0)),
            unschedulable=f.get(names.KSM_NODE_UNSCHEDULABLE, 0) > 0 and name not in ours,
            annotations=people.get(name, {}),
        )
        for name, f in facts.items()
    }


_OUR_MARK = names.ksm_annotation_label(annotation_keys.ISOLATED_AT)
_PEOPLES_MARKS = {key: names.ksm_annotation_label(key) for key in annotation_keys.FOR_PEOPLE}
_NODE_FACTS = {names.KSM_NODE_CAPACITY, names.KSM_NODE_ALLOCATABLE, names.KSM_NODE_UNSCHEDULABLE}


def replay(
    history: Iterable[tuple[datetime, tuple[fleet.MetricSample, ...] | SourceError]],
    classifier: xid_signals.XidClassifier,
    settings: settings_model.GuardSettings,
) -> BacktestReport:
    report = BacktestReport()
    isolated: dict[str, Mapping[str, str]] = {}
    withheld_marks: dict[str, str] = {}  # the breaker's marks, so a trip holds in the replay
    for at, got in history:
        report.instants += 1
        if isinstance(got, SourceError):
            report.undecided += 1
            report.first_error = report.first_error or f"{at.isoformat()}: {got}"
            continue
        nodes = [
            _overlay(n, isolated.get(n.name), withheld_marks.get(n.name))
            for n in nodes_at(got).values()
        ]
        snapshot = fleet.FleetSnapshot(taken_at=at, nodes=tuple(nodes), samples=got)
        decision = isolate.decide(snapshot, classifier, settings)
        for action in decision.actions:
            isolated[action.node] = action.annotations
            withheld_marks.pop(action.node, None)
            report.isolations.append(_would(at, action))
        for marking in decision.markings:
            if marking.value is None:
                withheld_marks.pop(marking.node, None)
            else:
                withheld_marks[marking.node] = marking.value
        report.findings.update(str(f.reason) for f in decision.findings)
    return report


def _overlay(
    node: fleet.Node, marks: Mapping[str, str] | None, withheld_mark: str | None
) -> fleet.Node:
    """The node as the replay's own isolations left it: cordoned with the marks, or — for a
    GPU isolation (docs/gpu-isolation.md) — serving with the GPU's mark."""
    if withheld_mark is not None:
        node = replace(node, annotations={**node.annotations, withheld.KEY: withheld_mark})
    if marks is None:
        return node
    if annotation_keys.ISOLATED_AT in marks:
        return replace(node, unschedulable=True, annotations={**node.annotations, **marks})
    return replace(node, annotations={**node.annotations, **marks})


def _gpu_fault(action: decisions.Action) -> str:
    """A GPU isolation's fault: the newest entry of its ``gpuguard.io/gpu-isolated`` mark."""
    entries = fleet.Node(action.node, "", 0, 0, annotations=action.annotations).marks.gpus
    return f"{entries[-1].fault} (GPU {entries[-1].index})" if entries else ""


def _would(at: datetime, action: decisions.Action) -> WouldIsolate:
    return WouldIsolate(
        at=at,
        node=action.node,
        reason=action.reason,
        fault=action.annotations.get(annotation_keys.REASON) or _gpu_fault(action),
        detail=action.detail,
        evidence=tuple(e.describe() for e in action.evidence),
    )
