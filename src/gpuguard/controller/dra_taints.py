"""The DRA route of GPU isolation, applied: where the cluster serves DeviceTaintRules, keep
one per isolated GPU that a node's ResourceSlices publish, re-resolved by UUID every tick (a
republished slice may rename the device), verified by reading back what the API stored, and
deleted when the GPU returns (``policy/gpu_route.py`` decides; docs/gpu-isolation.md#dra).

Each write is checked against leadership like every other step; a failed or unverified write
is retried at the next tick (compute mode PROHIBITED keeps holding the GPU meanwhile).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from gpuguard.errors import GpuguardError
from gpuguard.model import decisions, fleet, gpu_isolation, ports
from gpuguard.policy import gpu_route

log = logging.getLogger(__name__)


class TaintsPort(Protocol):
    def rules(self) -> list[dict[str, Any]] | None:
        """gpuguard's DeviceTaintRules; None when the cluster does not serve them."""
        ...

    def slices(self) -> list[dict[str, Any]]: ...

    def put(self, rule: dict[str, Any], current: dict[str, Any] | None) -> dict[str, Any]: ...

    def delete(self, name: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Tainted:
    node: str
    detail: str
    action: decisions.Action | None = None


@dataclass
class DraTaints:
    taints: TaintsPort
    writer: ports.ClusterWriter
    effect: gpu_route.Effect = gpu_route.Effect.NO_SCHEDULE

    def run(self, snapshot: fleet.FleetSnapshot, may_write: Callable[[], bool]) -> list[Tainted]:
        nodes = [n for n in snapshot.nodes if gpu_isolation.KEY in n.annotations]
        try:
            rules = self.taints.rules()
            if rules is None or not (rules or nodes):
                return []  # no DeviceTaintRules served (v1 or v1beta2), or nothing to do
            devices = gpu_route.slice_devices(self.taints.slices())
        except GpuguardError as e:
            log.warning("DRA taints not reconciled (next tick retries): %s", e)
            return []
        changes = gpu_route.reconcile(nodes, devices, rules, self.effect)
        if not may_write():
            return [Tainted(c.node, f"would write: {c.detail}") for c in changes]
        return [t for c in changes if (t := self._write(c, snapshot.taken_at)) is not None]

    def _write(self, change: gpu_route.TaintChange, now: datetime) -> Tainted | None:
        try:
            if change.rule is None:
                self.taints.delete(change.name)
                reason = decisions.Reason.GPU_DRA_UNTAINTED
            else:
                stored = self.taints.put(change.rule, change.current)
                if not gpu_route.same_rule(stored, change.rule):
                    log.warning("%s: DeviceTaintRule %s stored differently (next tick writes "
                                "it again)", change.node, change.name)
                    return Tainted(change.node, f"not verified: {change.detail}")
                reason = decisions.Reason.GPU_DRA_TAINTED
        except GpuguardError as e:
            log.warning("%s: %s: %s (next tick retries)", change.node, change.detail, e)
            return None
        action = decisions.Action(kind=decisions.ActionKind.ANNOTATE, node=change.node,
                                  reason=reason, detail=change.detail)
        try:
            self.writer.record_event(action, now)
        except GpuguardError as e:
            log.warning("%s: %s, but the Event could not be recorded: %s", change.node,
                        change.detail, e)
        return Tainted(change.node, change.detail, action)
