"""Fakes of gpuguard's ports (model.ports): they record calls and inject errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gpuguard.actuators import ledger as ledger_store
from gpuguard.model import decisions, faults, fleet, jobs


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

    def samples(self, at: datetime) -> tuple[fleet.MetricSample, ...]:
        self.asked_at.append(at)
        if self.error is not None:
            raise self.error
        return tuple(self.series)


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

    def create(self, manifest: dict[str, Any]) -> bool:
        self.created.append(manifest)
        return True

    def result(self, name: str) -> jobs.JobResult:
        return self.results.get(name, jobs.JobResult(jobs.JobState.ABSENT))


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
