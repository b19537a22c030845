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
from dataclasses import dataclass, field
from datetime import datetime

from gpuguard.controller import recovery as recovery_step
from gpuguard.controller import restore as restore_step
from gpuguard.errors import ConflictError, GpuguardError, SourceError
from gpuguard.model import decisions, fleet, ports
from gpuguard.model import settings as settings_model
from gpuguard.policy import isolate, xid_signals
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
    returns: list[restore_step.ReturnOutcome] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None


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
    restore: restore_step.Restore | None = None

    def tick(self) -> TickResult:
        result = TickResult(at=self.clock.now())
        try:
            result.snapshot = self._collect(result.at)
        except SourceError as e:
            log.warning("tick at %s: no decision, source error: %s", result.at, e)
            result.error, result.error_kind = str(e), "source"
            return result
        result.decision = isolate.decide(result.snapshot, self.classifier, self.settings)
        self._act(result.snapshot, result.decision, result)
        if self.recovery is not None:
            result.recovery = self.recovery.run(
                result.snapshot.nodes,
                result.at,
                may_write=lambda: not self.dry_run and self.is_leader(),
            )
        if self.restore is not None:
            result.returns = self.restore.run(
                result.snapshot, result.at, may_write=lambda: not self.dry_run and self.is_leader()
            )
        return result

    def _collect(self, at: datetime) -> fleet.FleetSnapshot:
        nodes = self.cluster.nodes()
        pods = self.cluster.pods()
        samples = self.metrics.samples(at)
        return fleet.FleetSnapshot(taken_at=at, nodes=nodes, pods=pods, samples=samples)

    def _act(
        self,
        snapshot: fleet.FleetSnapshot,
        decision: isolate.IsolationDecision,
        result: TickResult,
    ) -> None:
        for action in decision.actions:
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
        try:
            self.writer.record_event(action, result.at)
        except GpuguardError as e:
            log.warning("%s: isolated, but the Event could not be recorded: %s", node.name, e)
        if self.notifier is not None:
            try:
                self.notifier.notify(action, result.at)
            except GpuguardError as e:
                log.warning("%s: isolated, but the notification failed: %s", node.name, e)
