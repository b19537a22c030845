"""One guard tick: collect → decide → act.

Collect reads the cluster and Prometheus at one instant; a SourceError ends the tick with
nothing done (fail closed). Decide is the pure isolation policy. Act applies each action with
leadership re-checked before every write; a 409 leaves the node for the next tick to re-read.
A crash between any two steps leaves a state the next tick completes: the only durable state
is what the node patch itself wrote.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from gpuguard.controller import change as change_step
from gpuguard.controller import failsafe, fault_history, fitness_label, phantom_watch, tick_ledger
from gpuguard.controller import fleet_health as fleet_health_step
from gpuguard.controller import gpu_isolation as gpu_step
from gpuguard.controller import recovery as recovery_step
from gpuguard.controller import remediation as remediation_step
from gpuguard.controller import return_to_pool as return_step
from gpuguard.controller import steps as tick_steps
from gpuguard.controller import world as world_model
from gpuguard.errors import SourceError
from gpuguard.model import decisions, fleet, ports
from gpuguard.model import settings as settings_model
from gpuguard.policy import gpu_pods, isolate, xid_signals
from gpuguard.policy import phantom as phantom_policy
from gpuguard.policy import recovery as recovery_policy

log = logging.getLogger(__name__)


@dataclass
class TickResult:
    """What one tick saw, decided and did."""

    at: datetime
    decision: isolate.IsolationDecision | None = None
    applied: list[decisions.Action] = field(default_factory=list)
    skipped: list[tuple[decisions.Action, str]] = field(default_factory=list)
    error: str | None = None
    error_kind: str | None = None
    snapshot: fleet.FleetSnapshot | None = None
    recovery: list[recovery_policy.RecoveryStep] = field(default_factory=list)
    returns: list[return_step.ReturnOutcome] = field(default_factory=list)
    remediations: list[remediation_step.Outcome] = field(default_factory=list)  # opt-in repairs
    phantom: phantom_policy.PhantomDecision | None = None
    marked: list[isolate.Marking] = field(default_factory=list)
    history: fault_history.Outcome = field(default_factory=fault_history.Outcome)
    step_errors: failsafe.StepErrors = field(default_factory=list)  # failed closed, went on
    silent: tuple[decisions.Finding, ...] = ()  # nodes whose dcgm-exporter stopped answering
    gpus: list[gpu_step.Outcome] = field(default_factory=list)
    changes: list[change_step.Outcome] = field(default_factory=list)  # declared change rollouts
    fleet_health: fleet_health_step.FleetHealth | None = None  # read-only findings
    left_to_next: tuple[str, ...] = ()  # later steps a wake cut short (the woken tick runs them)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def tick_again(self) -> tuple[str, ...]:
        """Fast-path faults this tick left to the per-tick limit after it isolated a node: the
        loop ticks again at once for them (docs/design.md#fast-path). Never after a tick that
        isolated nothing, so it cannot loop; the breaker's limits cap the ticks in a row."""
        if self.decision is None or not self.applied:
            return ()
        return self.decision.fast_path_left


@dataclass
class Guard:
    """The wiring of one tick; every collaborator is a port, so tests use fakes. The tick
    collects a ``TickWorld`` and runs ``steps`` over it, in order (``controller.steps``)."""

    metrics: ports.MetricsSource
    cluster: ports.ClusterReader
    writer: ports.ClusterWriter
    classifier: xid_signals.XidClassifier
    settings: settings_model.GuardSettings
    clock: ports.Clock
    is_leader: Callable[[], bool] = lambda: True
    dry_run: bool = False
    notifier: ports.Notifier | None = None
    recovery: recovery_step.Recovery | None = None
    return_to_pool: return_step.ReturnToPool | None = None
    remediation: remediation_step.Remediation | None = None  # opt-in per pool (remediation.*)
    phantom: phantom_watch.PhantomWatch | None = None
    history: fault_history.FaultHistory | None = None
    gpu_isolation: gpu_step.GpuIsolation | None = None
    changes: change_step.Changes | None = None
    fleet_health: fleet_health_step.FleetHealthWatch | None = None
    fitness_label: fitness_label.FitnessLabel | None = None  # opt-in: health.label
    pods_on_gpus: ports.NodeMetricsSource | None = None  # of the nodes a tick may name them for

    ledger: tick_ledger.TickLedger | None = None  # the steps' one fault ledger, read once a tick
    steps: Callable[[Guard], Sequence[tick_steps.Step]] = tick_steps.shipped  # in order

    def tick(self, *, urgent: bool = False, woken: Callable[[], bool] | None = None) -> TickResult:
        """One tick. ``urgent`` (a wake: docs/design.md#fast-path) decides the isolation on the
        phantom check's standing decision instead of running a due one first: its window
        queries over every GPU would stand between a GPU gone from the bus and its cordon.
        ``woken``: whether a wake came meanwhile; asked after the isolation, before each later
        step (``steps.may_wait``), so a GPU gone from the bus never waits for a return's
        week-long queries: the steps left run in the woken tick, at once."""
        result = TickResult(at=self.clock.now())
        try:
            result.snapshot = self._collect(result)
        except SourceError as e:
            log.warning("tick at %s: no decision, source error: %s", result.at, e)
            result.error, result.error_kind = str(e), "source"
            return result
        world = self._world(result.snapshot, result.at, urgent=urgent)
        steps = self.steps(self)
        for at, step in enumerate(steps):  # each fails closed on its own: the next still runs
            if woken is not None and tick_steps.may_wait(step) and woken():
                result.left_to_next = tuple(type(s).__name__ for s in steps[at:])
                log.info("tick at %s: a wake came; %s left to the woken tick", result.at,
                         ", ".join(result.left_to_next))  # fmt: skip
                break
            step.run(world, result)
        return result

    def _world(
        self, snapshot: fleet.FleetSnapshot, now: datetime, *, urgent: bool
    ) -> world_model.TickWorld:
        """What every step reads this tick; the fault ledger is read afresh, at most once."""
        if self.ledger is not None:
            self.ledger.begin()
        return world_model.TickWorld(
            now=now,
            snapshot=snapshot,
            signals=world_model.signals_of(snapshot, self.classifier),
            ledger=self.ledger or (self.history.ledger if self.history is not None else None),
            settings=self.settings,
            urgent=urgent,
        )

    def may_write(self) -> bool:
        return not self.dry_run and self.is_leader()

    def _collect(self, result: TickResult) -> fleet.FleetSnapshot:
        """The cluster first (kept on the result, so ``explain`` can show a node even when
        Prometheus cannot answer), then the metrics, then the GPU pods of the nodes this tick
        may name them for (none such: no query); either read failing fails the tick closed."""
        nodes = self.cluster.nodes()
        pods = self.cluster.pods()
        result.snapshot = fleet.FleetSnapshot(taken_at=result.at, nodes=nodes, pods=pods)
        snapshot = replace(result.snapshot, samples=self.metrics.samples(result.at))
        asked = gpu_pods.nodes_to_name(snapshot) if self.pods_on_gpus is not None else ()
        if self.pods_on_gpus is None or not asked:
            return snapshot
        on_gpus = self.pods_on_gpus.samples_of(result.at, asked)
        return replace(snapshot, samples=(*snapshot.samples, *on_gpus))
