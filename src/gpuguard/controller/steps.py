"""The steps of one guard tick, in order, each of one shape: ``Step.run(world, result)``.

A step reads the tick's ``TickWorld`` and what earlier steps put on the ``TickResult`` and
adds its own part; each fails closed on its own (``controller.failsafe``), so the next still
runs. ``shipped`` lists the steps in order; adding a step is one class and one line there.
A step whose collaborator the guard was not given (``Guard.recovery`` None, ...) does nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Protocol, TypeVar

from gpuguard.controller import failsafe, fault_history
from gpuguard.controller.world import TickWorld
from gpuguard.errors import ConflictError, GpuguardError
from gpuguard.model import decisions, faults, fleet, gpu_isolation
from gpuguard.policy import freshness, isolate

if TYPE_CHECKING:
    from gpuguard.controller.tick import Guard, TickResult

log = logging.getLogger(__name__)

T = TypeVar("T")


class Step(Protocol):
    def run(self, world: TickWorld, result: TickResult) -> None:
        """Add this step's part to ``result``; never raise (fail closed, record the error)."""
        ...


def shipped(guard: Guard) -> tuple[Step, ...]:
    """The tick's steps, in the order they run."""
    return (
        Isolate(guard),
        GpuIsolation(guard),
        Freshness(),
        Recovery(guard),
        Remediation(guard),
        ReturnToPool(guard),
        Changes(guard),
        FleetHealth(guard),
        FitnessLabel(guard),
    )


def may_wait(step: Step) -> bool:
    """Whether a step may be left to the next tick when a wake comes during this one: every
    step after the isolation's (the isolation, GPU isolation and freshness never wait)."""
    return not isinstance(step, Isolate | GpuIsolation | Freshness)


def guarded(step: str, result: TickResult, run: Callable[[], T], default: T) -> T:
    """``failsafe.guarded`` with the tick as the subject and the result's error list."""
    subject = f"tick at {result.at.isoformat()}"
    return failsafe.guarded(step, subject, result.step_errors, run, default)


@dataclass
class Isolate:
    """Phantom cordons, the isolation decision, its writes and withheld marks, and every
    fault occurrence into the card's history."""

    guard: Guard

    def run(self, world: TickWorld, result: TickResult) -> None:
        phantom = partial(self._phantom_cordons, result, run=not world.urgent)
        no_cordons: tuple[decisions.Action, ...] = ()
        cordons = guarded("phantom", result, phantom, no_cordons)
        decide = partial(
            failsafe.isolate_sparing_others,
            world.snapshot, self.guard.classifier, world.settings, result.step_errors, cordons,
            self._ledger(world), signals=world.signals,
        )  # fmt: skip
        result.decision = decision = guarded("isolate", result, decide, None)
        if decision is None:
            return
        act = partial(self._act, world.snapshot, decision.actions, result)
        guarded("isolate", result, act, None)
        mark = partial(self._mark, world.snapshot, decision.markings, result)
        guarded("isolate", result, mark, None)
        self._history(world, result, decision)

    def _phantom_cordons(
        self, result: TickResult, *, run: bool = True
    ) -> tuple[decisions.Action, ...]:
        """Phantom findings every interval; the opt-in cordons of the standing decision go
        to the isolation policy, which admits them after the faults, through the breaker."""
        if self.guard.phantom is None:
            return ()
        if run:
            self.guard.phantom.run(result.at)
        result.phantom = self.guard.phantom.last
        return result.phantom.actions if result.phantom is not None else ()

    def _ledger(self, world: TickWorld) -> list[faults.LedgerEntry] | None:
        """The fault ledger for the GPU-or-node rule, read only when some node misses a GPU
        (no candidate otherwise); None when it cannot be read (the rule then takes the node)."""
        if self.guard.history is None or world.ledger is None:
            return []
        if not any(gpu_isolation.unexplained_missing(n) for n in world.snapshot.nodes):
            return []
        try:
            return world.ledger.entries().entries
        except GpuguardError as e:
            log.warning("fault ledger unreadable; GPU faults isolate their node: %s", e)
            return None

    def _history(
        self, world: TickWorld, result: TickResult, decision: isolate.IsolationDecision
    ) -> None:
        """Every fault occurrence into the card's history (``controller.fault_history``)."""
        if self.guard.history is None:
            return
        record = partial(
            self.guard.history.run, world.snapshot, tripped=decision.breaker.tripped,
            may_write=self.guard.may_write, signals=world.signals,
        )  # fmt: skip
        result.history = guarded("history", result, record, fault_history.Outcome())

    def _mark(
        self,
        snapshot: fleet.FleetSnapshot,
        markings: tuple[isolate.Marking, ...],
        result: TickResult,
    ) -> None:
        """Withheld-fault marks: a new one is a Warning Event and a notification."""
        for marking in markings:
            node = snapshot.node(marking.node)
            if node is None or not self.guard.may_write():
                continue
            action = decisions.Action(
                kind=decisions.ActionKind.ANNOTATE,
                node=marking.node,
                reason=marking.reason,
                detail=marking.detail,
            )
            try:
                self.guard.writer.annotate(node, marking.annotations)
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
            if self.guard.dry_run:
                result.skipped.append((action, "dry-run"))
            elif node is None:
                result.skipped.append((action, "node vanished"))
            elif not self.guard.is_leader():
                result.skipped.append((action, "not the leader"))
            else:
                self._apply(node, action, result)

    def _apply(self, node: fleet.Node, action: decisions.Action, result: TickResult) -> None:
        try:
            if action.kind is decisions.ActionKind.ISOLATE_GPU:
                self.guard.writer.annotate(node, dict(action.annotations))
            else:
                self.guard.writer.isolate(node, action)
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
            self.guard.writer.record_event(action, at)
        except GpuguardError as e:
            log.warning(
                "%s: %s, but the Event could not be recorded: %s", node.name, action.reason, e
            )
        if notify and self.guard.notifier is not None:
            try:
                self.guard.notifier.notify(action, at)
            except GpuguardError as e:
                log.warning("%s: %s, but the notification failed: %s", node.name, action.reason, e)


@dataclass
class GpuIsolation:
    """One GPU out of service on a node that keeps its others (``controller.gpu_isolation``)."""

    guard: Guard

    def run(self, world: TickWorld, result: TickResult) -> None:
        if self.guard.gpu_isolation is not None:
            gpus = partial(self.guard.gpu_isolation.run, world.snapshot,
                           may_write=self.guard.may_write)  # fmt: skip
            result.gpus = guarded("gpu-isolation", result, gpus, [])


@dataclass
class Freshness:
    """The nodes whose dcgm-exporter stopped answering (``policy.freshness``)."""

    def run(self, world: TickWorld, result: TickResult) -> None:
        staleness = world.settings.prometheus.staleness
        silent = partial(freshness.silent_exporters, world.snapshot, staleness)
        result.silent = guarded("freshness", result, silent, ())


@dataclass
class Recovery:
    """Burn-in and verdicts of isolated nodes (``controller.recovery``)."""

    guard: Guard

    def run(self, world: TickWorld, result: TickResult) -> None:
        if self.guard.recovery is not None:
            run = partial(self.guard.recovery.run, world.snapshot.nodes, world.now,
                          may_write=self.guard.may_write, errors=result.step_errors)  # fmt: skip
            result.recovery = guarded("recovery", result, run, [])


@dataclass
class Remediation:
    """The opt-in repairs (``controller.remediation``)."""

    guard: Guard

    def run(self, world: TickWorld, result: TickResult) -> None:
        if self.guard.remediation is not None:
            repair = partial(self.guard.remediation.run, world.snapshot, world.now,
                             may_write=self.guard.may_write)  # fmt: skip
            result.remediations = guarded("remediation", result, repair, [])


@dataclass
class ReturnToPool:
    """Nodes back to the pool after their verdict (``controller.return_to_pool``); a node whose
    exporter is silent (the freshness step) is not returned on its stale series."""

    guard: Guard

    def run(self, world: TickWorld, result: TickResult) -> None:
        if self.guard.return_to_pool is None:
            return
        unknown = frozenset(
            f.node for f in result.silent if f.reason is decisions.Reason.EXPORTER_SILENT
        )
        back = partial(self.guard.return_to_pool.run, world.snapshot, world.now,
                       may_write=self.guard.may_write, errors=result.step_errors,
                       silent=unknown)  # fmt: skip
        result.returns = guarded("return_to_pool", result, back, [])


@dataclass
class Changes:
    """Declared change rollouts (``controller.change``)."""

    guard: Guard

    def run(self, world: TickWorld, result: TickResult) -> None:
        if self.guard.changes is not None:
            roll = partial(self.guard.changes.run, world.snapshot, world.now,
                           may_write=self.guard.may_write)  # fmt: skip
            result.changes = guarded("change", result, roll, [])


@dataclass
class FleetHealth:
    """The read-only fleet findings (``controller.fleet_health``)."""

    guard: Guard

    def run(self, world: TickWorld, result: TickResult) -> None:
        if self.guard.fleet_health is not None:
            health = partial(self.guard.fleet_health.run, world.now,
                             may_write=self.guard.may_write)  # fmt: skip
            result.fleet_health = guarded("fleet-health", result, health, None)


@dataclass
class FitnessLabel:
    """The opt-in fitness label (``health.label``), from this tick's decision and findings."""

    guard: Guard

    def run(self, world: TickWorld, result: TickResult) -> None:
        decision = result.decision
        if self.guard.fitness_label is None or decision is None:
            return
        label = partial(self.guard.fitness_label.run, world.snapshot.nodes, world.now,
                        decision.actions, (*decision.findings, *result.silent),
                        may_write=self.guard.may_write, fleet=result.fleet_health)  # fmt: skip
        unlabelled: dict[str, str] = {}
        guarded("fitness-label", result, label, unlabelled)
