"""Every hardware fault gpuguard sees reaches the card's history (the fault ledger).

Isolation records only the fault it acts on; this records each *occurrence* of a hardware
fault wherever it happens — on a serving node, on a node gpuguard already isolated (another
card, or the same card again), on a node a person cordoned, on a node whose fault the breaker
withheld — when it is first seen, before anyone can uncordon the node and erase its marks.

A signal comes from the best source the node has (``xid_signals.all_signals``): the agent's
and dcgm-exporter's series, else the agent's ``GpuGoneFromBus`` node condition, so the tick a
condition wakes records the fault it isolates (docs/design.md#fast-path).

An occurrence is a signal whose count of whole occurrences rose since the previous tick (the
agent's and dcgm-exporter's counts), or a gauge's signal present now that was absent then. Any other
signal — one absent at the previous tick, seen then by the other kind of source (the
condition, then Prometheus, or back), or with no previous tick (a new leader) — is new only
where its count exceeds the occurrences the ledger already holds for that fault on that card:
within the lookback, or for a condition since it turned true (a card off the bus for days is
one fault). Both comparisons are in whole occurrences: Prometheus' ``increase()`` extrapolates
to its range's ends, so one occurrence can read 1.0000058 at one tick and 1.000353 at the next
(prometheus.io/docs/prometheus/latest/querying/functions/#increase), which is no second one.
So a counter that was only out of sight (its node rebooted, the agent's count kept) is not a
new fault, nor is the kernel's "fallen off the bus" beside an Xid 79 already recorded
(``faults.fault_identity``), nor dcgm-exporter's Xid 79 after the condition's line for the
same card, nor the same line again after a restart. ``needs_ledger`` says when that
comparison needs the ledger read. Each line says how the fault was established: the kernel
said the GPU fell off the bus (the agent's counter or its condition), or the device plugin
stopped offering a GPU on the node — unless the breaker tripped, which declares this tick's
signals suspect — else it was only observed in metrics.

The isolation line written later with the evidence verdict describes the same occurrence; the
ledger's escalation counts the two as one (``policy.escalation``).

Pure: the controller keeps the previous tick's signals and appends the entries.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuguard.model import decisions, faults, fleet, gpu_isolation, pci
from gpuguard.policy import escalation, xid_signals

SignalKey = tuple[str, str, str]  # (node, card: uuid, else PCI, else GPU index, fault label)
Seen = Mapping[SignalKey, float]
# A condition's keys stand apart from Prometheus' for the same fault: its 1 is no counter's
# count, so a hand-over between the two is compared with the ledger, never as a rise.
_CONDITION = "condition/"
_ROUNDING = 1e-9  # a float sum that should be whole (2.9999999999) still counts its last one


@dataclass(frozen=True, slots=True)
class FaultRecords:
    entries: tuple[faults.LedgerEntry, ...]
    seen: dict[SignalKey, float]  # this tick's signals, for the next tick to compare with
    evidence: tuple[decisions.Evidence, ...] = ()  # what each entry's signal rests on


def seen_now(signals: Mapping[str, Sequence[xid_signals.HardwareXid]]) -> dict[SignalKey, float]:
    return {_key(s): _count(s) for node_signals in signals.values() for s in node_signals}


def needs_ledger(
    signals: Mapping[str, Sequence[xid_signals.HardwareXid]], previous: Seen | None
) -> bool:
    """Whether ``record`` compares a signal with the ledger this tick (see the docstring)."""
    return any(_by_ledger(s, previous) for node_signals in signals.values() for s in node_signals)


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
    entries, evidence = [], []
    for node_signals in signals.values():
        for signal in node_signals:
            if signal.fabric:
                continue  # a switch or the fabric, no card: the ledger is per card
            since = _ledger_since(signal, now - lookback, merge_window)
            if not _is_new(signal, previous, ledger, since, merge_window):
                continue
            how = _confirmation(signal, by_name.get(signal.node), tripped)
            entries.append(_entry(signal, how, fault_time(signal, now)))
            evidence.append(signal.evidence)
    return FaultRecords(tuple(entries), seen, tuple(evidence))


def _ledger_since(
    signal: xid_signals.HardwareXid, lookback_start: datetime, merge_window: timedelta
) -> datetime:
    """Where the ledger's lines of this signal's occurrences begin: the Xid lookback, or for a
    condition the time it turned true, less the merge window (a scrape may have shown the
    fault a moment before the agent's condition did)."""
    if signal.source is xid_signals.XidSource.CONDITION and signal.evidence.at is not None:
        return signal.evidence.at - merge_window
    return lookback_start


def _is_new(
    signal: xid_signals.HardwareXid,
    previous: Seen | None,
    ledger: Sequence[faults.LedgerEntry],
    since: datetime,
    merge_window: timedelta,
) -> bool:
    if not _by_ledger(signal, previous):
        before = previous.get(_key(signal)) if previous is not None else None
        # a gauge's repeat shows as absent, then present
        return before is None or _whole(_count(signal)) > _whole(before)
    same = [e for e in ledger if e.at >= since and _same_fault(e, signal)]
    return len(escalation.occurrences(same, merge_window)) < _whole(_count(signal))


def _by_ledger(signal: xid_signals.HardwareXid, previous: Seen | None) -> bool:
    """Whether the signal is compared with the ledger rather than with the previous tick."""
    if previous is None:
        return True
    if _key(signal) in previous:
        return False
    if signal.source is not xid_signals.XidSource.DCGM_GAUGE:
        return True
    # the condition's fault, now shown by the gauge: any card of the node, as the condition
    # may name it by slot where the gauge names its UUID (the ledger compares cards exactly)
    node, _, fault = _condition_key(signal)
    return any(key[0] == node and key[2] == fault for key in previous)


def _confirmation(
    signal: xid_signals.HardwareXid, node: fleet.Node | None, tripped: bool
) -> faults.Confirmation:
    if signal.source is xid_signals.XidSource.CONDITION and (
        signal.fallen_off_bus or signal.xid == faults.FALLEN_OFF_BUS_XID
    ):  # GpuGoneFromBus: the kernel said so, config all ones
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
    entries = tuple(e for e in node.marks.gpus if e.confirmed)
    return gpu_isolation.is_isolated(entries, signal.uuid, signal.pci)


def fault_time(signal: xid_signals.HardwareXid, now: datetime) -> datetime:
    """When the fault happened, as near as the signal tells (docs/ledger.md#the-lines-time):
    the agent's condition turned true when the kernel said the GPU fell off the bus (its
    ``lastTransitionTime``); a count or a gauge only says it happened by this tick."""
    at = signal.evidence.at
    if signal.source is xid_signals.XidSource.CONDITION and at is not None and at <= now:
        return at.replace(microsecond=0)
    return now


def _entry(
    signal: xid_signals.HardwareXid, how: faults.Confirmation, at: datetime
) -> faults.LedgerEntry:
    return faults.LedgerEntry(
        at=at,
        node=signal.node,
        xid=signal.xid,
        pci=pci.try_normalize_pci(signal.pci),
        uuid=signal.uuid,
        recorder=faults.Recorder.GPUGUARD,
        kind=_kind(signal),
        confirmation=how,
    )


def _kind(signal: xid_signals.HardwareXid) -> faults.FaultKind:
    return faults.FaultKind.FALLEN_OFF_BUS if signal.fallen_off_bus else faults.FaultKind.XID


def _same_fault(entry: faults.LedgerEntry, signal: xid_signals.HardwareXid) -> bool:
    same = faults.fault_identity(entry.kind, entry.xid) == _identity(signal)
    if entry.node != signal.node or not same:
        return False
    if signal.uuid and entry.uuid:
        return entry.uuid == signal.uuid
    return entry.pci == pci.try_normalize_pci(signal.pci)


def _identity(signal: xid_signals.HardwareXid) -> tuple[faults.FaultKind, int | None]:
    return faults.fault_identity(_kind(signal), signal.xid)


def _key(signal: xid_signals.HardwareXid) -> SignalKey:
    if signal.source is xid_signals.XidSource.CONDITION:
        return _condition_key(signal)
    return (signal.node, _card(signal), signal.label)


def _condition_key(signal: xid_signals.HardwareXid) -> SignalKey:
    """The key the condition gives this signal's fault on its card (Xid 79 and "fallen off
    the bus" alike)."""
    kind, xid = _identity(signal)
    return (signal.node, _card(signal), _CONDITION + (f"xid-{xid}" if xid else str(kind)))


def _card(signal: xid_signals.HardwareXid) -> str:
    return signal.uuid or pci.try_normalize_pci(signal.pci) or signal.gpu


def _count(signal: xid_signals.HardwareXid) -> float:
    """A counter's value; a gauge's presence is 1 (a repeat shows as absent, then present)."""
    return 1.0 if signal.source is xid_signals.XidSource.DCGM_GAUGE else signal.count


def _whole(count: float) -> int:
    """Whole occurrences, at least the one a signal is: a count less ``increase()``'s
    extrapolation (see the module docstring)."""
    return max(1, math.floor(count + _ROUNDING))
