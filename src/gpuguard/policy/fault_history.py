"""Every hardware fault gpuguard sees reaches the card's history (the fault ledger).

Isolation records only the fault it acts on; this records each *occurrence* of a hardware
fault wherever it happens — on a serving node, on a node gpuguard already isolated (another
card, or the same card again), on a node a person cordoned, on a node whose fault the breaker
withheld — when it is first seen, before anyone can uncordon the node and erase its marks.

An occurrence is a signal (node, card, fault) whose counter rose since the previous tick (the
agent's and dcgm-exporter's counts), or a gauge's signal present now that was absent then. A
counted signal absent at the previous tick, or any signal with no previous tick (a new leader),
is new only where its count exceeds the occurrences the ledger already holds for that fault on
that card within the lookback: a counter that was only out of sight (its node rebooted, the
agent's count kept) is not a new fault, nor is the kernel's "fallen off the bus" beside an Xid
79 already recorded (``faults.fault_identity``). ``needs_ledger`` says when that comparison
needs the ledger read. Each line says how the fault was established: the kernel said the GPU
fell off the bus, or the device plugin stopped offering a GPU on the node — unless the breaker
tripped, which declares this tick's signals suspect — else it was only observed in metrics.

The isolation line written later with the evidence verdict describes the same occurrence; the
ledger's escalation counts the two as one (``policy.escalation``).

Pure: the controller keeps the previous tick's signals and appends the entries.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuguard.model import faults, fleet, gpu_isolation, pci
from gpuguard.policy import escalation, xid_signals

SignalKey = tuple[str, str, str]  # (node, card: uuid, else PCI, else GPU index, fault label)
Seen = Mapping[SignalKey, float]


@dataclass(frozen=True, slots=True)
class FaultRecords:
    entries: tuple[faults.LedgerEntry, ...]
    seen: dict[SignalKey, float]  # this tick's signals, for the next tick to compare with


def seen_now(signals: Mapping[str, Sequence[xid_signals.HardwareXid]]) -> dict[SignalKey, float]:
    return {_key(s): _count(s) for node_signals in signals.values() for s in node_signals}


def needs_ledger(
    signals: Mapping[str, Sequence[xid_signals.HardwareXid]], previous: Seen | None
) -> bool:
    """Whether ``record`` compares a signal with the ledger this tick (see the docstring)."""
    if previous is None:
        return True
    return any(
        _key(s) not in previous and s.source is not xid_signals.XidSource.DCGM_GAUGE
        for node_signals in signals.values()
        for s in node_signals
    )


def record(
    signals: Mapping[str, Sequence[xid_signals.HardwareXid]],
    previous: Seen | None,
    nodes: Iterable[fleet.Node],
    ledger: Sequence[faults.LedgerEntry],
    *,
    tripped: bool,
    now: datetime,
    lookback: timedelta,
    merge_window: timedelta = escalation.DEFAULT_MERGE_WINDOW,
) -> FaultRecords:
    """The ledger lines for this tick's new fault occurrences, and the signals seen."""
    seen = seen_now(signals)
    by_name = {n.name: n for n in nodes}
    recent = [e for e in ledger if e.at >= now - lookback]
    entries = []
    for node_signals in signals.values():
        for signal in node_signals:
            if not _is_new(signal, previous, recent, merge_window):
                continue
            how = _confirmation(signal, by_name.get(signal.node), tripped)
            entries.append(_entry(signal, how, now))
    return FaultRecords(tuple(entries), seen)


def _is_new(
    signal: xid_signals.HardwareXid,
    previous: Seen | None,
    recent: Sequence[faults.LedgerEntry],
    merge_window: timedelta,
) -> bool:
    before = previous.get(_key(signal)) if previous is not None else None
    if before is not None:
        return _count(signal) > before
    if previous is not None and signal.source is xid_signals.XidSource.DCGM_GAUGE:
        return True  # a gauge's repeat shows as absent, then present
    same = [e for e in recent if _same_fault(e, signal)]
    return len(escalation.occurrences(same, merge_window)) < _count(signal)


def _confirmation(
    signal: xid_signals.HardwareXid, node: fleet.Node | None, tripped: bool
) -> faults.Confirmation:
    if signal.source is xid_signals.XidSource.CONDITION:  # the kernel said so, config all ones
        return faults.Confirmation.KERNEL_LOG
    if signal.fallen_off_bus and signal.source is xid_signals.XidSource.AGENT:
        return faults.Confirmation.KERNEL_LOG
    if node is not None and not tripped and _isolated_confirmed(node, signal):
        return faults.Confirmation.ISOLATED_CARD
    if node is not None and node.gpus_missing > 0 and not tripped:
        return faults.Confirmation.DEVICE_PLUGIN
    return faults.Confirmation.OBSERVED


def _isolated_confirmed(node: fleet.Node, signal: xid_signals.HardwareXid) -> bool:
    """The card is one gpuguard holds out, its fault confirmed by the host's kernel log."""
    entries = tuple(e for e in gpu_isolation.read(node) if e.confirmed)
    return gpu_isolation.is_isolated(entries, signal.uuid, signal.pci)


def _entry(
    signal: xid_signals.HardwareXid, how: faults.Confirmation, now: datetime
) -> faults.LedgerEntry:
    kind = faults.FaultKind.FALLEN_OFF_BUS if signal.fallen_off_bus else faults.FaultKind.XID
    return faults.LedgerEntry(
        at=now,
        node=signal.node,
        xid=signal.xid,
        pci=pci.try_normalize_pci(signal.pci),
        uuid=signal.uuid,
        recorder=faults.Recorder.GPUGUARD,
        kind=kind,
        confirmation=how,
    )


def _same_fault(entry: faults.LedgerEntry, signal: xid_signals.HardwareXid) -> bool:
    kind = faults.FaultKind.FALLEN_OFF_BUS if signal.fallen_off_bus else faults.FaultKind.XID
    same = faults.fault_identity(entry.kind, entry.xid) == faults.fault_identity(kind, signal.xid)
    if entry.node != signal.node or not same:
        return False
    if signal.uuid and entry.uuid:
        return entry.uuid == signal.uuid
    return entry.pci == pci.try_normalize_pci(signal.pci)


def _key(signal: xid_signals.HardwareXid) -> SignalKey:
    card = signal.uuid or pci.try_normalize_pci(signal.pci) or signal.gpu
    return (signal.node, card, signal.label)


def _count(signal: xid_signals.HardwareXid) -> float:
    """A counter's value; a gauge's presence is 1 (a repeat shows as absent, then present)."""
    return 1.0 if signal.source is xid_signals.XidSource.DCGM_GAUGE else signal.count
