"""Fakes of gpuguard's ports (model.ports): they record calls and inject errors."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from gpuguard.actuators import ledger as ledger_store
from gpuguard.errors import ConflictError
from gpuguard.model import decisions, faults, fleet, jobs, series


@dataclass
class FakeClock:
    current: datetime

    def now(self) -> datetime:
        return self.current

    def step(self, delta: timedelta) -> None:
        self.current += delta


@dataclass
class FakeMetrics:
    series: list[fleet.MetricSample] = field(default_factory=list)
    error: Exception | None = None
    asked_at: list[datetime] = field(default_factory=list)
    asked_nodes: list[tuple[str, ...]] = field(default_factory=list)

    def samples(self, at: datetime) -> tuple[fleet.MetricSample, ...]:
        self.asked_at.append(at)
        if self.error is not None:
            raise self.error
        return tuple(self.series)

    def samples_of(self, at: datetime, nodes: Sequence[str]) -> tuple[fleet.MetricSample, ...]:
        """The series whose node (``model.series.node_of``) is one of ``nodes``."""
        self.asked_nodes.append(tuple(nodes))
        return tuple(s for s in self.samples(at) if series.node_of(s.labels) in nodes)


@dataclass
class FakeCluster:
    node_list: list[fleet.Node] = field(default_factory=list)
    pod_list: list[fleet.Pod] = field(default_factory=list)

    def nodes(self) -> tuple[fleet.Node, ...]:
        return tuple(self.node_list)

    def pods(self) -> tuple[fleet.Pod, ...]:
        return tuple(self.pod_list)


@dataclass
class FakeWriter:
    """Records every write; ``errors[node]`` is raised on that node's isolate()."""

    isolated: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    annotated: list[tuple[str, dict[str, str | None]]] = field(default_factory=list)
    uncordoned: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    events: list[decisions.Action] = field(default_factory=list)
    errors: dict[str, Exception] = field(default_factory=dict)
    event_error: Exception | None = None

    def isolate(self, node: fleet.Node, action: decisions.Action) -> None:
        if node.name in self.errors:
            raise self.errors[node.name]
        self.isolated.append((node.name, dict(action.annotations)))

    def annotate(self, node: fleet.Node, annotations: dict[str, str | None]) -> None:
        if node.name in self.errors:
            raise self.errors[node.name]
        self.annotated.append((node.name, dict(annotations)))

    def uncordon(self, node: fleet.Node, remove_annotations: tuple[str, ...]) -> None:
        if node.name in self.errors:
            raise self.errors[node.name]
        self.uncordoned.append((node.name, tuple(remove_annotations)))

    def record_event(self, action: decisions.Action, now: datetime) -> None:
        if self.event_error is not None:
            raise self.event_error
        self.events.append(action)


@dataclass
class FakeJobs:
    results: dict[str, jobs.JobResult] = field(default_factory=dict)
    created: list[dict[str, Any]] = field(default_factory=list)
    read: list[tuple[str, str | None]] = field(default_factory=list)  # (name, created_uid)

    def create(self, manifest: dict[str, Any]) -> str | None:
        self.created.append(manifest)
        return f"uid-{manifest['metadata']['name']}"

    def result(self, name: str, created_uid: str | None = None) -> jobs.JobResult:
        self.read.append((name, created_uid))
        return self.results.get(name, jobs.JobResult(jobs.JobState.ABSENT))


@dataclass
class FakeBurnins(FakeJobs):
    """Burn-in Jobs that end as soon as they are created, with ``gpuguard burnin``'s summary
    as their termination message: passed, or failed on the nodes in ``failing``."""

    failing: set[str] = field(default_factory=set)

    def create(self, manifest: dict[str, Any]) -> str | None:
        passed = manifest["spec"]["template"]["spec"]["nodeName"] not in self.failing
        checks = [] if passed else [{"check": "throughput-floor", "status": "FAIL",
                                     "evidence": "GPU 3 at 0.61 of its model"}]
        summary = json.dumps({"passed": passed, "found_gpus": 8, "checks": checks})
        state = jobs.JobState.SUCCEEDED if passed else jobs.JobState.FAILED
        self.results[manifest["metadata"]["name"]] = jobs.JobResult(state, summary)
        return super().create(manifest)


@dataclass
class FakeLedger:
    lines: list[faults.LedgerEntry] = field(default_factory=list)
    error: Exception | None = None

    def entries(self) -> ledger_store.LedgerRead:
        return ledger_store.LedgerRead(entries=list(self.lines), malformed=[])

    def append(self, entry: Any) -> None:
        if self.error:
            raise self.error
        self.lines.append(entry)


@dataclass
class FakeNodes:
    """Nodes that take the change rollout's writes (``set_schedulable``) as the API server
    would: annotations merged (None removes), the cordon set; ``conflicts`` answer 409 once."""

    nodes: dict[str, fleet.Node] = field(default_factory=dict)
    writes: list[tuple[str, dict[str, str | None], bool | None]] = field(default_factory=list)
    events: list[decisions.Action] = field(default_factory=list)
    conflicts: set[str] = field(default_factory=set)
    notified: list[decisions.Action] = field(default_factory=list)

    def set_schedulable(
        self, node: fleet.Node, annotations: dict[str, str | None], unschedulable: bool | None
    ) -> None:
        if node.name in self.conflicts:
            self.conflicts.discard(node.name)
            raise ConflictError(f"patching Node {node.name}: Conflict (409)")
        self.writes.append((node.name, dict(annotations), unschedulable))
        current = self.nodes[node.name]
        merged = {k: v for k, v in {**current.annotations, **annotations}.items() if v is not None}
        cordon = current.unschedulable if unschedulable is None else unschedulable
        self.nodes[node.name] = replace(current, annotations=merged, unschedulable=cordon)

    def update(self, name: str, **changes: Any) -> None:
        self.nodes[name] = replace(self.nodes[name], **changes)

    def record_event(self, action: decisions.Action, now: datetime) -> None:
        self.events.append(action)

    def notify(self, action: decisions.Action, now: datetime) -> None:
        self.notified.append(action)

    def snapshot(self, at: datetime, pods: tuple[fleet.Pod, ...] = ()) -> fleet.FleetSnapshot:
        return fleet.FleetSnapshot(taken_at=at, nodes=tuple(self.nodes.values()), pods=pods)


@dataclass
class NodesCluster:
    """``FakeNodes`` as a tick's cluster reader and writer: an isolation cordons and annotates
    its node as the API server would, so the next tick reads it (and the breaker counts it)."""

    api: FakeNodes

    def nodes(self) -> tuple[fleet.Node, ...]:
        return tuple(self.api.nodes.values())

    def pods(self) -> tuple[fleet.Pod, ...]:
        return ()

    def isolate(self, node: fleet.Node, action: decisions.Action) -> None:
        self.api.set_schedulable(node, dict(action.annotations), True)

    def annotate(self, node: fleet.Node, annotations: dict[str, str | None]) -> None:
        self.api.set_schedulable(node, annotations, None)

    def record_event(self, action: decisions.Action, now: datetime) -> None:
        self.api.record_event(action, now)


@dataclass
class FakeChanges:
    """Declared changes (``sources.changes.Declared``) and kured's lock annotation."""

    declared: tuple[Any, ...] = ()
    kured_lock: str | None = None
    kured_asked: list[tuple[str, str]] = field(default_factory=list)

    def changes(self) -> tuple[Any, ...]:
        return self.declared

    def lock(self, kured_namespace: str, name: str) -> str | None:
        self.kured_asked.append((kured_namespace, name))
        return self.kured_lock


@dataclass
class FakeWorkloadPods:
    """The gang detector's pod source (``controller.fleet_health.PodSource``)."""

    pod_list: list[Any] = field(default_factory=list)
    error: Exception | None = None

    def pods(self) -> tuple[Any, ...]:
        if self.error is not None:
            raise self.error
        return tuple(self.pod_list)


@dataclass
class FakeWorkloadEvents:
    """Records the Events written on workloads; ``error`` makes each write fail."""

    recorded: list[tuple[str, Any, decisions.Finding]] = field(default_factory=list)
    error: Exception | None = None

    def record(self, namespace: str, about: Any, finding: decisions.Finding, now: datetime) -> None:
        if self.error is not None:
            raise self.error
        self.recorded.append((namespace, about, finding))
