"""Decide which nodes to auto-cordon this tick (docs/design.md#isolation).

A node is isolated when a hardware Xid coincides with GPU loss (capacity > allocatable) held
through the hold window; unambiguous faults (Xid 79, the kernel's "fallen off the bus") with the
GPU gone take a fast path on the first tick that sees both. Never a node a human cordoned,
never more than N per tick, never past the breaker. Everything not acted on becomes a finding
with its reason, so ``explain`` can say why a node was left alone.

A pure function: no I/O, no clock (``snapshot.taken_at`` is now).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuguard.model import annotation_keys, decisions, fleet
from gpuguard.model import metric_names as names
from gpuguard.model import settings as settings_model
from gpuguard.policy import breaker, xid_signals

Reason = decisions.Reason


@dataclass(frozen=True, slots=True)
class IsolationDecision:
    actions: tuple[decisions.Action, ...]
    findings: tuple[decisions.Finding, ...]
    breaker: breaker.BreakerState


@dataclass(frozen=True, slots=True)
class _Candidate:
    node: fleet.Node
    fault: xid_signals.HardwareXid
    reason: Reason
    evidence: tuple[decisions.Evidence, ...]


def is_auto_isolated(node: fleet.Node) -> bool:
    """gpuguard's cordon: unschedulable AND carrying gpuguard's isolated-at annotation."""
    return node.unschedulable and annotation_keys.ISOLATED_AT in node.annotations


def is_human_cordoned(node: fleet.Node) -> bool:
    return node.unschedulable and annotation_keys.ISOLATED_AT not in node.annotations


def decide(
    snapshot: fleet.FleetSnapshot,
    classifier: xid_signals.XidClassifier,
    settings: settings_model.GuardSettings,
) -> IsolationDecision:
    signals = xid_signals.hardware_xids(snapshot.samples, classifier)
    held = _gpu_loss_held(snapshot.samples)
    gpu_nodes = [n for n in snapshot.nodes if n.gpu_capacity > 0]
    state = breaker.evaluate(
        sum(1 for n in gpu_nodes if is_auto_isolated(n)), len(gpu_nodes), settings.isolation
    )
    candidates: list[_Candidate] = []
    findings: list[decisions.Finding] = []
    for node in snapshot.nodes:
        candidate, finding = _assess(node, signals.get(node.name, []), held, settings, snapshot)
        if candidate is not None:
            candidates.append(candidate)
        if finding is not None:
            findings.append(finding)
    actions, withheld = _admit(candidates, state, settings.isolation, snapshot)
    return IsolationDecision(tuple(actions), tuple(findings + withheld), state)


def _gpu_loss_held(samples: tuple[fleet.MetricSample, ...]) -> dict[str, fleet.MetricSample]:
    return {
        node: s
        for s in samples
        if s.name == names.GPU_LOSS_HELD and (node := xid_signals.node_of(s.labels))
    }


def _assess(
    node: fleet.Node,
    signals: list[xid_signals.HardwareXid],
    held: dict[str, fleet.MetricSample],
    settings: settings_model.GuardSettings,
    snapshot: fleet.FleetSnapshot,
) -> tuple[_Candidate | None, decisions.Finding | None]:
    if is_auto_isolated(node):
        return None, None
    loss = _loss_evidence(node, snapshot)
    if not signals:
        if node.gpus_missing and not node.unschedulable:
            return None, _finding(node, Reason.GPU_LOSS_WITHOUT_XID, (loss,))
        return None, None
    fault = _primary(signals, settings.isolation)
    evidence = (fault.evidence, loss)
    if is_human_cordoned(node):
        return None, _finding(node, Reason.HUMAN_CORDON, evidence, fault)
    if not node.gpus_missing:
        return None, _finding(node, Reason.HARDWARE_XID_WITHOUT_GPU_LOSS, evidence, fault)
    if _is_fast_path(fault, settings.isolation):
        return _Candidate(node, fault, Reason.FAST_PATH, evidence), None
    held_sample = held.get(node.name)
    if held_sample is None or held_sample.value <= 0:
        return None, _finding(node, Reason.HARDWARE_XID_HOLDING, evidence, fault)
    held_evidence = decisions.Evidence(
        source=f"min_over_time(gpu capacity - allocatable [{settings.isolation.hold_window}])",
        value=f"{held_sample.value:g}",
        at=held_sample.timestamp,
    )
    reason = Reason.HARDWARE_XID_WITH_GPU_LOSS
    return _Candidate(node, fault, reason, (*evidence, held_evidence)), None


def _primary(
    signals: list[xid_signals.HardwareXid], isolation: settings_model.IsolationSettings
) -> xid_signals.HardwareXid:
    """The fault named in the annotations: a fast-path one first, then the lowest GPU."""
    return min(signals, key=lambda s: (not _is_fast_path(s, isolation), s.gpu, s.xid or 0))


def _is_fast_path(
    fault: xid_signals.HardwareXid, isolation: settings_model.IsolationSettings
) -> bool:
    if fault.fallen_off_bus:
        return isolation.fast_path_fallen_off_bus
    return fault.xid in isolation.fast_path_xids


def _loss_evidence(node: fleet.Node, snapshot: fleet.FleetSnapshot) -> decisions.Evidence:
    return decisions.Evidence(
        source=f"node/{node.name} nvidia.com/gpu capacity/allocatable",
        value=f"{node.gpu_capacity}/{node.gpu_allocatable}",
        at=snapshot.taken_at,
    )


def _finding(
    node: fleet.Node,
    reason: Reason,
    evidence: tuple[decisions.Evidence, ...],
    fault: xid_signals.HardwareXid | None = None,
) -> decisions.Finding:
    return decisions.Finding(
        kind="isolation",
        node=node.name,
        reason=reason,
        gpu=fault.gpu if fault else None,
        evidence=evidence,
        detail=fault.label if fault else "",
    )


def _admit(
    candidates: list[_Candidate],
    state: breaker.BreakerState,
    isolation: settings_model.IsolationSettings,
    snapshot: fleet.FleetSnapshot,
) -> tuple[list[decisions.Action], list[decisions.Finding]]:
    ordered = sorted(candidates, key=lambda c: (c.reason != Reason.FAST_PATH, c.node.name))
    allowed = min(isolation.max_isolations_per_tick, state.room)
    actions = [_isolate(c, snapshot) for c in ordered[:allowed]]
    blocked = Reason.BREAKER_OPEN if state.room <= len(actions) else Reason.TICK_LIMIT
    withheld = [
        _finding(c.node, blocked, (*c.evidence, _breaker_evidence(state, snapshot)), c.fault)
        for c in ordered[allowed:]
    ]
    return actions, withheld


def _breaker_evidence(
    state: breaker.BreakerState, snapshot: fleet.FleetSnapshot
) -> decisions.Evidence:
    return decisions.Evidence(source="breaker", value=state.describe(), at=snapshot.taken_at)


def _isolate(candidate: _Candidate, snapshot: fleet.FleetSnapshot) -> decisions.Action:
    node, fault = candidate.node, candidate.fault
    marks = {
        annotation_keys.REASON: fault.label,
        annotation_keys.ISOLATED_AT: snapshot.taken_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        annotation_keys.BOOT_ID: node.boot_id,
        annotation_keys.GPU_CAPACITY: str(node.gpu_capacity),
    }
    if fault.uuid:
        marks[annotation_keys.GPU_UUID] = fault.uuid
    if fault.pci:
        marks[annotation_keys.GPU_PCI] = fault.pci
    return decisions.Action(
        kind=decisions.ActionKind.ISOLATE,
        node=node.name,
        reason=candidate.reason,
        evidence=candidate.evidence,
        annotations=marks,
        detail=f"{fault.label} on GPU {fault.gpu} ({fault.source}), "
        f"GPUs {node.gpu_allocatable}/{node.gpu_capacity} allocatable",
    )
