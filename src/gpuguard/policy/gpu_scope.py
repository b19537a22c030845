"""GPU or node: isolate the smallest thing that contains the fault (docs/gpu-isolation.md).

A fault that belongs to one card whose node is otherwise sound — an ECC double-bit error, row
remapping, a contained or uncontained ECC error (Xid 48, 63, 64, 94, 95 by default) — takes only
that GPU out; the node keeps serving with the others. The node is isolated when the repair or
the risk needs it, first rule that matches wins:

1. GPU isolation is switched off (``gpu_isolation.enabled``);
2. the GPU fell off the bus or its Xid is a fast-path one (79): only a power cycle brings it
   back, and a GPU that left the bus breaks allocation for every pod on the node (NVIDIA
   k8s-device-plugin issues #231 and #2038);
3. an NVLink / fabric Xid, a fatal NVSwitch SXid or a failed fabric registration: the fault
   spans GPUs;
4. more than one card on the node is faulty (or more GPUs are gone than the faulty card);
5. an Xid that is not in the per-card set (unknown reach: the node);
6. the card cannot be named (no UUID): no mechanism can single it out;
7. the fault that makes ``node_after_slot_faults`` in its slot (riser, slot or power), or a
   slot history that could not be read;
8. no GPU would be left serving.

Each decision says which rule and why, with the evidence. Pure: the ledger is an input.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from gpuguard.model import decisions, faults, fleet, gpu_isolation, pci
from gpuguard.model import settings as settings_model
from gpuguard.policy import escalation, xid_signals

Reason = decisions.Reason
Scope = gpu_isolation.Scope


@dataclass(frozen=True, slots=True)
class ScopeDecision:
    scope: Scope
    reason: Reason
    detail: str
    evidence: tuple[decisions.Evidence, ...] = ()
    mechanisms: tuple[str, ...] = ()  # for a GPU: what keeps it out (settings)


def decide(
    fault: xid_signals.HardwareXid,
    signals: Sequence[xid_signals.HardwareXid],
    node: fleet.Node,
    ledger: Sequence[faults.LedgerEntry] | None,
    settings: settings_model.GuardSettings,
    now: datetime,
) -> ScopeDecision:
    """Whether ``fault`` (one of the node's current ``signals``) isolates its GPU or its node.
    ``ledger`` is the fault ledger (None: it could not be read)."""
    config = settings.gpu_isolation
    isolated = node.marks.gpus
    cards = {_card(s) for s in signals}
    if not config.enabled:
        return _node(Reason.GPU_ISOLATION_OFF, "GPU isolation is off (gpu_isolation.enabled)")
    if fault.fallen_off_bus or fault.xid in settings.isolation.fast_path_xids:
        return _node(Reason.NEEDS_POWER_CYCLE, f"{fault.label}: only a power cycle brings the "
                     "GPU back, and a GPU off the bus breaks allocation for the whole node")
    if fault.fabric or fault.xid in config.fabric_xids:
        return _node(Reason.FABRIC_FAULT, f"{fault.label}: an NVLink/fabric fault spans GPUs")
    if len(cards) > 1 or gpu_isolation.unexplained_missing(node) > 1:
        return _node(Reason.SEVERAL_GPUS, f"{len(cards)} faulty cards, "
                     f"{node.gpus_missing} GPUs not offered on the node")
    if fault.xid not in config.gpu_xids:
        return _node(Reason.NODE_SCOPED_XID, f"{fault.label} is not in gpu_isolation.gpu_xids")
    if not fault.uuid:
        return _node(Reason.GPU_UNIDENTIFIED, f"GPU {fault.gpu} has no UUID in the signals: "
                     "no mechanism can single it out")
    slot = _slot_faults(fault, node, ledger, settings, now)
    if slot is None:
        return _node(Reason.SLOT_HISTORY_UNKNOWN, "the fault ledger could not be read")
    if slot >= config.node_after_slot_faults:
        return _node(Reason.SLOT_REPEATS, f"fault {slot} in slot {fault.pci or fault.gpu} "
                     f"(node from {config.node_after_slot_faults}): check the slot, riser, power")
    if node.gpu_capacity - len(isolated) <= 1:
        return _node(Reason.NO_GPU_LEFT, "no other GPU would be left serving")
    slot_evidence = decisions.Evidence(
        source=f"ledger: faults in slot {fault.pci or fault.gpu} of {node.name}",
        value=str(slot),
        at=now,
    )
    detail = (
        f"{fault.label} belongs to GPU {fault.gpu} ({fault.uuid}); fault {slot} in its slot, "
        "the node is otherwise sound"
    )
    evidence = (_scope_evidence(Scope.GPU, Reason.GPU_SCOPED_FAULT, detail), slot_evidence)
    return ScopeDecision(Scope.GPU, Reason.GPU_SCOPED_FAULT, detail, evidence, config.mechanisms)


def _node(reason: Reason, detail: str) -> ScopeDecision:
    return ScopeDecision(Scope.NODE, reason, detail, (_scope_evidence(Scope.NODE, reason, detail),))


def _scope_evidence(scope: Scope, reason: Reason, detail: str) -> decisions.Evidence:
    return decisions.Evidence(source=f"gpu-or-node: {scope}", value=f"{reason}: {detail}")


def _card(signal: xid_signals.HardwareXid) -> str:
    return signal.uuid or signal.pci or signal.gpu


def _slot_faults(
    fault: xid_signals.HardwareXid,
    node: fleet.Node,
    ledger: Sequence[faults.LedgerEntry] | None,
    settings: settings_model.GuardSettings,
    now: datetime,
) -> int | None:
    """Faults in the slot, this one included: the ledger's occurrences (confirmed or only
    observed) other than this fault's own lines within the lookback, plus this one."""
    if ledger is None:
        return None
    history = escalation.history_for(
        ledger, fault.uuid, node.name, pci.try_normalize_pci(fault.pci)
    )
    since = now - settings.isolation.xid_lookback
    lines = (*history.slot_faults, *history.slot_observed)
    before = [e for e in lines if not (e.xid == fault.xid and e.at >= since)]
    return len(before) + 1
