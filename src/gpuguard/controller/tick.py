"""One guard tick: collect → decide → act.

Collect reads the cluster and Prometheus at one instant; a SourceError ends the tick with
nothing done (fail closed). Decide is the pure isolation policy. Act applies each action with
leadership re-checked before every write; a 409 leaves the node for the next tick to re-read.
A crash between any two steps leaves a state the next tick completes: the only durable state
is what the node patch itself wrote.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial

from gpuguard.controller import change as change_step
from gpuguard.controller import failsafe, fault_history, fitness_label, phantom_watch
from gpuguard.controller import fleet_health as fleet_health_step
from gpuguard.controller import gpu_isolation as gpu_step
from gpuguard.controller import recovery as recovery_step
from gpuguard.controller import remediation as remediation_step
from gpuguard.controller import return_to_pool as return_step
from gpuguard.errors import ConflictError, GpuguardError, SourceError
from gpuguard.model import decisions, faults, fleet, gpu_isolation, ports
from gpuguard.model import settings as settings_model
from gpuguard.policy import freshness, gpu_pods, isolate, xid_signals
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
    """The wiring of one tick; every collaborator is a port, so tests use fakes."""

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

    def tick(self, *, urgent: bool = False, woken: Callable[[], bool] | None = None) -> TickResult:
        """One tick. ``urgent`` (a wake: docs/design.md#fast-path) decides the isolation on the
        phantom check's standing decision instead of running a due one first: its window
        queries over every GPU would stand between a GPU gone from the bus and its cordon.
        ``woken``: whether a wake came meanwhile; asked after the isolation, before each later
        step (recovery, repairs, returns, rollouts, fleet health), so a GPU gone from the bus
        never waits for a return's week-long queries: the steps left run in the woken tick."""
        result = TickResult(at=self.clock.now())
        try:
            result.snapshot = self._collect(result)
        except SourceError as e:
            log.warning("tick at %s: no decision, source error: %s", result.at, e)
            result.error, result.error_kind = str(e), "source"
            return result
        self._steps(result, result.snapshot, urgent=urgent, woken=woken or _never)
        return result

    def _steps(
        self,
        result: TickResult,
        snapshot: fleet.FleetSnapshot,
        *,
        urgent: bool = False,
        woken: Callable[[], bool],
    ) -> None:
        """Each step fails closed on its own (``controller.failsafe``): the next still runs."""
        errors, subject = result.step_errors, f"tick at {result.at.isoformat()}"
        no_cordons: tuple[decisions.Action, ...] = ()
        phantom = partial(self._phantom_cordons, result, run=not urgent)
        cordons = failsafe.guarded("phantom", subject, errors, phantom, no_cordons)
        decide = partial(
            failsafe.isolate_sparing_others,
            snapshot, self.classifier, self.settings, errors, cordons, self._ledger(snapshot),
        )  # fmt: skip
        result.decision = decision = failsafe.guarded("isolate", subject, errors, decide, None)
        if decision is not None:
            act = partial(self._act, snapshot, decision.actions, result)
            failsafe.guarded("isolate", subject, errors, act, None)
            mark = partial(self._mark, snapshot, decision.markings, result)
            failsafe.guarded("isolate", subject, errors, mark, None)
            self._history(result, snapshot, decision)
        if self.gpu_isolation is not None:
            gpus = partial(self.gpu_isolation.run, snapshot, may_write=self._may_write)
            result.gpus = failsafe.guarded("gpu-isolation", subject, errors, gpus, [])
        silent = partial(freshness.silent_exporters, snapshot, self.settings.prometheus.staleness)
        result.silent = failsafe.guarded("freshness", subject, errors, silent, ())
        later = self._later_steps(result, snapshot, decision)
        for at, (_, run_step) in enumerate(later):
            if woken():
                result.left_to_next = tuple(n for n, _ in later[at:])
                log.info("tick at %s: a wake came; %s left to the woken tick", result.at,
                         ", ".join(result.left_to_next))  # fmt: skip
                return
            run_step()

    def _later_steps(
        self,
        result: TickResult,
        snapshot: fleet.FleetSnapshot,
        decision: isolate.IsolationDecision | None,
    ) -> list[tuple[str, Callable[[], object]]]:
        """The steps after the isolation, in order, each failing closed on its own."""
        errors, subject = result.step_errors, f"tick at {result.at.isoformat()}"
        unknown = frozenset(
            f.node for f in result.silent if f.reason is decisions.Reason.EXPORTER_SILENT
        )
        may_write = self._may_write
        steps: list[tuple[str, Callable[[], object]]] = []
        if (recovery := self.recovery) is not None:
            def recover() -> None:
                run = partial(recovery.run, snapshot.nodes, result.at, may_write=may_write,
                              errors=errors)  # fmt: skip
                result.recovery = failsafe.guarded("recovery", subject, errors, run, [])
            steps.append(("recovery", recover))
        if (remediation := self.remediation) is not None:
            def repair() -> None:
                run = partial(remediation.run, snapshot, result.at, may_write=may_write)
                result.remediations = failsafe.guarded("remediation", subject, errors, run, [])
            steps.append(("remediation", repair))
        if (return_to_pool := self.return_to_pool) is not None:
            def back() -> None:
                run = partial(return_to_pool.run, snapshot, result.at, may_write=may_write,
                              errors=errors, silent=unknown)  # fmt: skip
                result.returns = failsafe.guarded("return_to_pool", subject, errors, run, [])
            steps.append(("return_to_pool", back))
        if (changes := self.changes) is not None:
            def roll() -> None:
                run = partial(changes.run, snapshot, result.at, may_write=may_write)
                result.changes = failsafe.guarded("change", subject, errors, run, [])
            steps.append(("change", roll))
        if (fleet_health := self.fleet_health) is not None:
            def health() -> None:
                run = partial(fleet_health.run, result.at, may_write=may_write)
                result.fleet_health = failsafe.guarded("fleet-health", subject, errors, run, None)
            steps.append(("fleet-health", health))
        if (fitness := self.fitness_label) is not None and decision is not None:
            def label() -> None:
                run = partial(fitness.run, snapshot.nodes, result.at, decision.actions,
                              (*decision.findings, *result.silent), may_write=may_write,
                              fleet=result.fleet_health)
                unlabelled: dict[str, str] = {}
                failsafe.guarded("fitness-label", subject, errors, run, unlabelled)
            steps.append(("fitness-label", label))
        return steps

    def _history(
        self,
        result: TickResult,
        snapshot: fleet.FleetSnapshot,
        decision: isolate.IsolationDecision,
    ) -> None:
        """Every fault occurrence into the card's history (``controller.fault_history``)."""
        if self.history is None:
            return
        record = partial(
            self.history.run,
            snapshot, tripped=decision.breaker.tripped, may_write=self._may_write,
        )  # fmt: skip
        subject = f"tick at {result.at.isoformat()}"
        result.history = failsafe.guarded(
            "history", subject, result.step_errors, record, fault_history.Outcome()
        )

    def _may_write(self) -> bool:
        return not self.dry_run and self.is_leader()

    def _ledger(self, snapshot: fleet.FleetSnapshot) -> list[faults.LedgerEntry] | None:
        """The fault ledger for the GPU-or-node rule, read only when some node misses a GPU
        (no candidate otherwise); None when it cannot be read (the rule then takes the node)."""
        if self.history is None:
            return []
        if not any(gpu_isolation.unexplained_missing(n) for n in snapshot.nodes):
            return []
        try:
            return self.history.ledger.entries().entries
        except GpuguardError as e:
            log.warning("fault ledger unreadable; GPU faults isolate their node: %s", e)
            return None

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

    def _phantom_cordons(
        self, result: TickResult, *, run: bool = True
    ) -> tuple[decisions.Action, ...]:
        """Phantom findings every interval; the opt-in cordons of the standing decision go
        to the isolation policy, which admits them after the faults, through the breaker."""
        if self.phantom is None:
            return ()
        if run:
            self.phantom.run(result.at)
        result.phantom = self.phantom.last
        return result.phantom.actions if result.phantom is not None else ()

    def _mark(
        self,
        snapshot: fleet.FleetSnapshot,
        markings: tuple[isolate.Marking, ...],
        result: TickResult,
    ) -> None:
        """Withheld-fault marks: a new one is a Warning Event and a notification."""
        for marking in markings:
            node = snapshot.node(marking.node)
            if node is None or not self._may_write():
                continue
            action = decisions.Action(
                kind=decisions.ActionKind.ANNOTATE,
                node=marking.node,
                reason=marking.reason,
                detail=marking.detail,
            )
            try:
                self.writer.annotate(node, marking.annotations)
            except GpuguardError as e:
                log.warning("%s: withheld mark not written (next tick retries): %s", node.name, e)
                continue
            result.marked.append(marking)
            self._tell(node, action, result.at, notify=marking.value is not None)

    def _act(
        self,
        snapshot: fleet.FleetSnapshot,
        actions: tuple[decisions.Action, ...],
        result: TickResult,
    ) -> None:
        for action in actions:
            node = snapshot.node(action.node)
            if self.dry_run:
                result.skipped.append((action, "dry-run"))
            elif node is None:
                result.skipped.append((action, "node vanished"))
            elif not self.is_leader():
                result.skipped.append((action, "not the leader"))
            else:
                self._apply(node, action, result)

    def _apply(self, node: fleet.Node, action: decisions.Action, result: TickResult) -> None:
        try:
            if action.kind is decisions.ActionKind.ISOLATE_GPU:
                self.writer.annotate(node, dict(action.annotations))
            else:
                self.writer.isolate(node, action)
        except ConflictError as e:
            log.info("%s: %s; re-read next tick", node.name, e)
            result.skipped.append((action, "conflict: node changed since read"))
            return
        except GpuguardError as e:
            log.error("%s: isolation failed: %s", node.name, e)
            result.skipped.append((action, f"error: {e}"))
            result.error, result.error_kind = str(e), "write"
            return
        result.applied.append(action)
        log.info(
            "isolated %s reason=%s %s evidence=[%s]",
            node.name,
            action.reason,
            action.detail,
            "; ".join(e.describe() for e in action.evidence),
        )
        self._tell(node, action, result.at, notify=True)

    def _tell(
        self, node: fleet.Node, action: decisions.Action, at: datetime, *, notify: bool
    ) -> None:
        """An Event on the node and, when asked, a notification; failures are logged only."""
        try:
            self.writer.record_event(action, at)
        except GpuguardError as e:
            log.warning(
                "%s: %s, but the Event could not be recorded: %s", node.name, action.reason, e
            )
        if notify and self.notifier is not None:
            try:
                self.notifier.notify(action, at)
            except GpuguardError as e:
                log.warning("%s: %s, but the notification failed: %s", node.name, action.reason, e)


def _never() -> bool:
    return False
