"""The fault-history step of a tick: append a ledger line for each new hardware fault
occurrence (``policy.fault_history`` decides which), wherever it happened — from the same
signals the isolation decides on, so the tick a node condition wakes records the fault it
isolates (docs/design.md#fast-path), and the line is stored before that tick ends.

It remembers the previous tick's signals in memory only; a new leader compares with the ledger
instead. A ledger that cannot be read or written is logged and retried next tick — the
signals seen are not remembered then, so nothing is lost.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from gpuguard.actuators import ledger as ledger_store
from gpuguard.catalog import xid as xid_catalog
from gpuguard.errors import GpuguardError
from gpuguard.model import annotation_keys, decisions, faults, fleet, ports
from gpuguard.policy import escalation, fault_history, recovery, xid_signals

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Outcome:
    recorded: tuple[faults.LedgerEntry, ...] = ()
    escalated: tuple[decisions.Action, ...] = ()  # nodes whose request now escalates further


@dataclass
class FaultHistory:
    ledger: ports.LedgerPort[ledger_store.LedgerRead]
    catalog: xid_catalog.XidCatalog
    lookback: timedelta
    writer: ports.ClusterWriter | None = None  # raises an isolated node's escalation
    merge_window: timedelta = escalation.DEFAULT_MERGE_WINDOW  # merge_window_for(hold window)
    _seen: fault_history.Seen | None = field(default=None, repr=False)
    _unwritten: list[faults.LedgerEntry] = field(default_factory=list, repr=False)
    _seen_by: dict[faults.LedgerEntry, str] = field(default_factory=dict, repr=False)

    def run(
        self,
        snapshot: fleet.FleetSnapshot,
        *,
        tripped: bool,
        may_write: Callable[[], bool],
        signals: Mapping[str, list[xid_signals.HardwareXid]] | None = None,
    ) -> Outcome:
        """``signals``: the tick's ``xid_signals.all_signals`` (None: computed here)."""
        if signals is None:
            signals = xid_signals.all_signals(snapshot, self.catalog)
        if not may_write():
            self._seen = None  # a later term of leadership compares with the ledger instead
            return Outcome()
        unchanged = self._seen is not None and fault_history.seen_now(signals) == self._seen
        if unchanged and not self._unwritten:
            return Outcome()
        try:
            needed = fault_history.needs_ledger(signals, self._seen)
            ledger = [*self.ledger.entries().entries, *self._unwritten] if needed else []
        except GpuguardError as e:
            log.warning("fault history waits: the ledger cannot be read: %s", e)
            return Outcome()
        records = fault_history.record(
            signals,
            self._seen,
            snapshot.nodes,
            ledger,
            tripped=tripped,
            now=snapshot.taken_at,
            lookback=self.lookback,
            merge_window=self.merge_window,
        )
        self._seen = records.seen
        self._unwritten += records.entries
        self._seen_by |= {e: ev.source for e, ev in zip(records.entries, records.evidence,
                                                       strict=True)}  # fmt: skip
        written = self._write()
        escalated: tuple[decisions.Action, ...] = ()
        if self.writer is not None and any(e.confirmed for e in written):
            escalated = self._escalate(self.writer, snapshot, written)
        return Outcome(written, escalated)

    def _escalate(
        self,
        writer: ports.ClusterWriter,
        snapshot: fleet.FleetSnapshot,
        written: tuple[faults.LedgerEntry, ...],
    ) -> tuple[decisions.Action, ...]:
        """A confirmed fault on a node that already has its verdict may raise the card's
        escalation: the node's request says so at once, with an Event."""
        try:
            ledger = self.ledger.entries().entries
        except GpuguardError as e:
            log.warning("escalation not updated (ledger unreadable): %s", e)
            return ()
        done = []
        for entry in (e for e in written if e.confirmed):
            node = snapshot.node(entry.node)
            marks = (
                None
                if node is None
                else recovery.escalation_update(
                    node, entry, ledger, self.catalog, merge_window=self.merge_window
                )
            )
            if node is None or marks is None:
                continue
            action = decisions.Action(
                kind=decisions.ActionKind.ANNOTATE,
                node=node.name,
                reason=decisions.Reason.ESCALATED,
                annotations=marks,
                detail=marks[annotation_keys.REQUEST],
            )
            try:
                writer.annotate(node, dict(marks))
                writer.record_event(action, snapshot.taken_at)
            except GpuguardError as e:
                log.warning("%s: escalation not updated (next fault retries): %s", node.name, e)
                continue
            done.append(action)
        return tuple(done)

    def _write(self) -> tuple[faults.LedgerEntry, ...]:
        """Append what is pending, oldest first; what fails stays pending with its own time,
        so a retry writes the same line (the ledger never writes a line twice)."""
        written = []
        while self._unwritten:
            entry = self._unwritten[0]
            try:
                self.ledger.append(entry)
            except GpuguardError as e:
                log.warning("%s: fault not recorded yet (next tick retries): %s", entry.node, e)
                break
            written.append(self._unwritten.pop(0))
        for entry in written:
            log.info(
                "%s: fault recorded in the ledger: %s card %s (%s; seen in %s)",
                entry.node,
                entry.xid if entry.xid is not None else entry.kind,
                entry.uuid or "unknown",
                entry.confirmation,
                self._seen_by.pop(entry, "unknown"),
            )
        return tuple(written)
