"""Scheduling and interconnect health in the guard's loop (docs/fleet-health.md): every
``every`` (1 min by default) it reads the cluster's pods and the fleet-health plan from
Prometheus, runs the pure detectors (``policy.gang``, ``policy.topology``,
``policy.interconnect``) and reports — findings, a Warning Event on the owner of each job newly
found in a partial allocation, and the gauges ``telemetry`` exports. Read-only toward
workloads and nodes: it never cordons, evicts or deletes anything. The agent's GPU topology,
which changes only with the hardware, is kept between runs (``controller.topology_cache``)
where the guard wires one; without it, it is read with the rest each run.

Each source fails on its own: pods unreadable means no gang findings this time, a bad
Prometheus answer no topology or interconnect findings, never a crash of the tick
(``controller.failsafe`` wraps the whole step as well). An Event is written only by the leader
(``may_write``) and once per deadlock while it lasts; it is logged, not retried, when it fails.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from gpuguard.controller import topology_cache
from gpuguard.errors import GpuguardError, SourceError
from gpuguard.model import decisions, fleet, ports, workloads
from gpuguard.model import settings as settings_model
from gpuguard.policy import gang, interconnect, topology
from gpuguard.sources import fleet_health as health_source

log = logging.getLogger(__name__)


class PodSource(Protocol):
    def pods(self) -> tuple[workloads.WorkloadPod, ...]: ...


class EventRecorder(Protocol):
    def record(
        self, namespace: str, about: workloads.OwnerRef, finding: decisions.Finding, now: datetime
    ) -> None: ...


@dataclass(frozen=True)
class FleetHealth:
    """One evaluation: gang deadlocks, every finding (gang, topology, interconnect), the nodes
    that throttle or flap persistently, and the checks whose input was missing (with why)."""

    at: datetime
    gangs: tuple[gang.GangDeadlock, ...] = ()
    findings: tuple[decisions.Finding, ...] = ()
    persistent: tuple[interconnect.NodeHealth, ...] = ()
    unchecked: tuple[str, ...] = ()


@dataclass
class FleetHealthWatch:
    pods: PodSource
    metrics: ports.MetricsSource | None
    settings: settings_model.FleetHealthSettings
    events: EventRecorder | None = None
    topologies: topology_cache.TopologyCache | None = None  # None: in ``metrics``' answer
    every: timedelta = timedelta(minutes=1)
    last: FleetHealth | None = None
    _told: set[gang.JobKey] = field(default_factory=set)

    def run(self, at: datetime, *, may_write: Callable[[], bool] = lambda: False) -> FleetHealth:
        """A fresh evaluation when one is due, else the standing one."""
        if self.last is not None and at - self.last.at < self.every:
            return self.last
        unchecked: list[str] = []
        gangs = self._gangs(at, unchecked)
        read = self._samples(at, unchecked)
        samples = read or ()
        found = [d.finding() for d in gangs]
        held = health_source.pod_gpus(samples)
        matrices = topology.from_samples(samples) | self._topology(at, held, unchecked)
        found += topology.mismatches(matrices, held)
        found += interconnect.detect(samples, self.settings)
        if read is not None:  # an answer of no series at all checked nothing
            unchecked += [f"{kind}: no series (exporter does not collect it)"
                          for kind in interconnect.unchecked(samples)]  # fmt: skip
        self.last = FleetHealth(
            at, tuple(gangs), tuple(found),
            tuple(interconnect.persistent(samples, self.settings)), tuple(unchecked),
        )  # fmt: skip
        self._tell(gangs, at, may_write)
        return self.last

    def _gangs(self, at: datetime, unchecked: list[str]) -> list[gang.GangDeadlock]:
        try:
            pods = self.pods.pods()
        except SourceError as e:
            log.warning("gang check skipped: %s", e)
            unchecked.append(f"{gang.KIND}: pods unreadable ({e})")
            return []
        return gang.detect(pods, at, grace=self.settings.gang_grace)

    def _samples(
        self, at: datetime, unchecked: list[str]
    ) -> tuple[fleet.MetricSample, ...] | None:
        """The plan's samples; None (and why, in ``unchecked``) when there is no answer."""
        if self.metrics is None:
            unchecked.append("topology and interconnect: no Prometheus configured")
            return None
        try:
            return self.metrics.samples(at)
        except SourceError as e:
            log.warning("topology and interconnect checks skipped: %s", e)
            unchecked.append(f"topology and interconnect: Prometheus answer refused ({e})")
            return None

    def _topology(
        self, at: datetime, held: dict[str, dict[str, tuple[int, ...]]], unchecked: list[str]
    ) -> dict[str, topology.NodeTopology]:
        """The kept matrices of the nodes where a pod holds several GPUs (the only ones
        ``topology.mismatches`` judges)."""
        shared = [node for node, pods in held.items() if any(len(g) > 1 for g in pods.values())]
        if self.topologies is None or not shared:
            return {}
        return self.topologies.matrices(at, shared, unchecked)

    def _tell(
        self, gangs: list[gang.GangDeadlock], at: datetime, may_write: Callable[[], bool]
    ) -> None:
        """One Event per deadlock while it lasts; a job that recovered may be told again."""
        current = {d.job for d in gangs}
        self._told &= current
        if self.events is None:
            return
        for deadlock in gangs:
            if deadlock.job in self._told or not may_write():
                continue
            about = deadlock.owner or workloads.OwnerRef("Pod", deadlock.pending[0].name)
            try:
                self.events.record(deadlock.job.namespace, about, deadlock.finding(), at)
            except GpuguardError as e:
                log.warning("job %s: partial allocation found, Event not recorded: %s",
                            deadlock.job, e)  # fmt: skip
                continue
            self._told.add(deadlock.job)
