"""The fault-history step of a tick: append a ledger line for each new hardware fault
occurrence (``policy.fault_history`` decides which), wherever it happened.

It remembers the previous tick's signals in memory only; a new leader compares with the ledger
instead. A ledger that cannot be read or written is logged and retried next tick — the
signals seen are not remembered then, so nothing is lost.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from gpuguard.controller.recovery import LedgerPort
from gpuguard.errors import GpuguardError
from gpuguard.model import faults, fleet
from gpuguard.policy import fault_history, xid_signals

log = logging.getLogger(__name__)


@dataclass
class FaultHistory:
    ledger: LedgerPort
    classifier: xid_signals.XidClassifier
    lookback: timedelta
    _seen: fault_history.Seen | None = field(default=None, repr=False)
    _unwritten: list[faults.LedgerEntry] = field(default_factory=list, repr=False)

    def run(
        self, snapshot: fleet.FleetSnapshot, *, tripped: bool, may_write: Callable[[], bool]
    ) -> tuple[faults.LedgerEntry, ...]:
        signals = xid_signals.hardware_xids(snapshot.samples, self.classifier)
        unchanged = self._seen is not None and fault_history.seen_now(signals) == self._seen
        if (unchanged and not self._unwritten) or not may_write():
            return ()
        try:
            ledger = self.ledger.entries().entries if self._seen is None else []
        except GpuguardError as e:
            log.warning("fault history waits: the ledger cannot be read: %s", e)
            return ()
        records = fault_history.record(
            signals,
            self._seen,
            snapshot.nodes,
            ledger,
            tripped=tripped,
            now=snapshot.taken_at,
            lookback=self.lookback,
        )
        self._seen = records.seen
        self._unwritten += records.entries
        return self._write()

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
                "%s: fault recorded in the ledger: %s card %s (%s)",
                entry.node,
                entry.xid if entry.xid is not None else entry.kind,
                entry.uuid or "unknown",
                entry.confirmation,
            )
        return tuple(written)
