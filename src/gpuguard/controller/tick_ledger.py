"""The fault ledger as one tick sees it: read once a tick, read again only after a write.

Every step that reads the per-card ledger (the GPU-or-node rule, fault history, recovery,
GPU isolation, return to pool) shares one ``TickLedger``; the guard calls ``begin`` at the
start of each tick. A read that raises is not kept (the next reader tries again), and an
append (even one that fails) drops the kept read, so a step never decides on a ledger that
misses its own line.
"""

from __future__ import annotations

from typing import Any

from gpuguard.actuators import ledger as ledger_store
from gpuguard.model import ports


class TickLedger:
    """A ``ports.LedgerPort`` over ``store`` that keeps the tick's read."""

    def __init__(self, store: ports.LedgerPort[ledger_store.LedgerRead]) -> None:
        self._store = store
        self._read: ledger_store.LedgerRead | None = None
        self.reads = 0  # of the store, since this ledger was made

    def begin(self) -> None:
        """A new tick: the next ``entries`` reads the store."""
        self._read = None

    def entries(self) -> ledger_store.LedgerRead:
        if self._read is None:
            self.reads += 1
            self._read = self._store.entries()
        return self._read

    def append(self, entry: Any) -> None:
        self._read = None
        self._store.append(entry)
