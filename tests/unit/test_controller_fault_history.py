"""The fault-history step: one ledger line per occurrence, retried with its own time when the
ledger cannot be written, and a new term of leadership compares with the ledger."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from gpuguard.actuators import ledger as ledger_store
from gpuguard.controller import fault_history
from gpuguard.errors import GpuguardError
from gpuguard.model import faults, fleet
from gpuguard.model import metric_names as names
from tests.builders import Classifier

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@dataclass
class MemoryLedger:
    lines: list[faults.LedgerEntry] = field(default_factory=list)
    fail_appends: int = 0
    reads: int = 0

    def entries(self) -> ledger_store.LedgerRead:
        self.reads += 1
        return ledger_store.LedgerRead(entries=list(self.lines))

    def append(self, entry: Any) -> None:
        if self.fail_appends:
            self.fail_appends -= 1
            raise GpuguardError("409 three times")
        if entry not in self.lines:
            self.lines.append(entry)


def snapshot(at: datetime, *, xid: bool) -> fleet.FleetSnapshot:
    node = fleet.Node("gpu-node-b", "boot", 8, 7)
    labels = {"Hostname": "gpu-node-b", "gpu": "4", "UUID": "GPU-1"}
    samples = (fleet.MetricSample(names.DCGM_XID_LAST, labels, 79.0, at),) if xid else ()
    return fleet.FleetSnapshot(at, nodes=(node,), samples=samples)


def step(ledger: MemoryLedger) -> fault_history.FaultHistory:
    return fault_history.FaultHistory(ledger, Classifier(), timedelta(hours=24))  # type: ignore[arg-type]


def test_a_lasting_fault_is_one_line_and_reads_the_ledger_only_when_something_changed() -> None:
    ledger = MemoryLedger()
    history = step(ledger)
    for minute in range(10):
        history.run(
            snapshot(NOW + timedelta(minutes=minute), xid=True),
            tripped=False,
            may_write=lambda: True,
        )
    assert len(ledger.lines) == 1
    assert ledger.reads == 1  # the first term's comparison only


def test_a_failed_write_is_retried_with_the_time_it_was_first_seen() -> None:
    ledger = MemoryLedger(fail_appends=1)
    history = step(ledger)
    first = history.run(snapshot(NOW, xid=True), tripped=False, may_write=lambda: True)
    assert first.recorded == ()
    later = history.run(
        snapshot(NOW + timedelta(minutes=1), xid=True), tripped=False, may_write=lambda: True
    )
    assert [e.at for e in later.recorded] == [NOW]


def test_a_new_term_of_leadership_compares_with_the_ledger() -> None:
    ledger = MemoryLedger()
    history = step(ledger)
    history.run(snapshot(NOW, xid=True), tripped=False, may_write=lambda: True)
    history.run(
        snapshot(NOW + timedelta(minutes=1), xid=False), tripped=False, may_write=lambda: False
    )
    # another replica led meanwhile; the fault is still there: not recorded twice
    history.run(
        snapshot(NOW + timedelta(minutes=2), xid=True), tripped=False, may_write=lambda: True
    )
    assert len(ledger.lines) == 1
