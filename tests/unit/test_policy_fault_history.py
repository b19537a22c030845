"""Every hardware fault occurrence reaches the ledger once, with how it was established."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpuguard.model import decisions, faults, fleet
from gpuguard.policy import fault_history, xid_signals

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
UUID = "GPU-0a8e0faa-d59d-595d-bf96-0adbb520ef6b"
Source = xid_signals.XidSource


def signal(
    node: str = "gpu-node-a",
    *,
    xid: int | None = 48,
    source: Source = Source.DCGM_GAUGE,
    count: float = 1.0,
) -> xid_signals.HardwareXid:
    evidence = decisions.Evidence("test", "x", NOW)
    return xid_signals.HardwareXid(
        node, "1", xid, source, evidence, uuid=UUID, pci="0000:2a:00.0", count=count
    )


def node(name: str = "gpu-node-a", *, allocatable: int = 4) -> fleet.Node:
    return fleet.Node(name, "boot", 4, allocatable)


def record(
    signals: list[xid_signals.HardwareXid],
    previous: fault_history.Seen | None,
    *,
    nodes: list[fleet.Node] | None = None,
    ledger: list[faults.LedgerEntry] | None = None,
    tripped: bool = False,
) -> fault_history.FaultRecords:
    by_node: dict[str, list[xid_signals.HardwareXid]] = {}
    for s in signals:
        by_node.setdefault(s.node, []).append(s)
    return fault_history.record(
        by_node,
        previous,
        nodes or [node()],
        ledger or [],
        tripped=tripped,
        now=NOW,
        lookback=timedelta(hours=24),
    )


def test_a_fault_is_recorded_once_when_first_seen() -> None:
    first = record([signal()], {})
    assert len(first.entries) == 1
    assert record([signal()], first.seen).entries == ()


def test_the_same_fault_again_after_it_cleared_is_a_new_occurrence() -> None:
    first = record([signal()], {})
    cleared = record([], first.seen)
    assert len(record([signal()], cleared.seen).entries) == 1


def test_a_rising_counter_is_a_new_occurrence() -> None:
    first = record([signal(source=Source.AGENT, count=1)], {})
    assert len(record([signal(source=Source.AGENT, count=2)], first.seen).entries) == 1


def test_the_device_plugin_dropping_the_gpu_confirms() -> None:
    (entry,) = record([signal()], {}, nodes=[node(allocatable=3)]).entries
    assert entry.confirmation is faults.Confirmation.DEVICE_PLUGIN
    (entry,) = record([signal()], {}, nodes=[node(allocatable=4)]).entries
    assert entry.confirmation is faults.Confirmation.OBSERVED


def test_a_tripped_breaker_makes_every_signal_only_observed() -> None:
    (entry,) = record([signal()], {}, nodes=[node(allocatable=3)], tripped=True).entries
    assert entry.confirmation is faults.Confirmation.OBSERVED
    assert not entry.confirmed


def test_the_kernel_saying_fallen_off_the_bus_confirms() -> None:
    (entry,) = record([signal(xid=None, source=Source.AGENT)], {}, tripped=True).entries
    assert entry.confirmation is faults.Confirmation.KERNEL_LOG
    assert entry.kind is faults.FaultKind.FALLEN_OFF_BUS


def test_a_new_leader_does_not_record_what_the_ledger_already_holds() -> None:
    known = faults.LedgerEntry(
        NOW - timedelta(hours=2), "gpu-node-a", 48, "0000:2a:00.0", UUID, faults.Recorder.GPUGUARD
    )
    assert record([signal()], None, ledger=[known]).entries == ()
    old = faults.LedgerEntry(
        NOW - timedelta(days=3), "gpu-node-a", 48, "0000:2a:00.0", UUID, faults.Recorder.GPUGUARD
    )
    assert len(record([signal()], None, ledger=[old]).entries) == 1


def kernel_fallen(*, count: float = 1.0) -> xid_signals.HardwareXid:
    return signal(xid=None, source=Source.AGENT, count=count)


def test_a_counter_back_in_sight_after_its_node_rebooted_is_not_a_new_fault() -> None:
    # The agent keeps its count across the reboot; while the node was down the series was
    # out of sight, so the previous tick did not see it.
    first = record([signal(xid=79, source=Source.AGENT), kernel_fallen()], {})
    lines = list(first.entries)
    assert len(lines) == 2  # Xid 79 and the kernel's message, one occurrence (escalation)
    assert fault_history.needs_ledger({"gpu-node-a": [kernel_fallen()]}, {})
    back = record([signal(xid=79, source=Source.AGENT), kernel_fallen()], {}, ledger=lines)
    assert back.entries == ()


def test_a_counter_that_rose_while_out_of_sight_is_a_new_fault() -> None:
    (line,) = record([signal(xid=79, source=Source.AGENT)], {}).entries
    back = record([signal(xid=79, source=Source.AGENT, count=2)], {}, ledger=[line])
    assert len(back.entries) == 1


def test_the_kernels_fallen_off_bus_after_a_recorded_xid79_is_the_same_fault() -> None:
    (line,) = record([signal(xid=79, source=Source.AGENT)], {}).entries
    assert record([kernel_fallen()], {}, ledger=[line]).entries == ()


def test_a_gauge_seen_again_after_it_cleared_needs_no_ledger_read() -> None:
    first = record([signal()], {})
    cleared = record([], first.seen)
    assert not fault_history.needs_ledger({"gpu-node-a": [signal()]}, cleared.seen)


def test_a_new_leader_counts_whole_occurrences_against_the_ledger() -> None:
    """``increase()`` extrapolates: one occurrence reads 1.0000058, two read 2.0000116."""
    held = list(record([signal(source=Source.AGENT)], None).entries)
    assert len(held) == 1
    one, two = (signal(source=Source.AGENT, count=c) for c in (1.0000058, 2.0000116))
    assert record([one], None, ledger=held).entries == ()
    (second,) = record([two], None, ledger=held).entries
    assert second.xid == 48


def test_a_count_read_again_with_another_extrapolation_is_no_new_occurrence() -> None:
    """``increase()`` of one rise reads 1.0000058 at a tick whose range starts just before a
    scrape and 1.000353 at the next (30 s scrapes, a 24 h lookback): the same occurrence."""
    agent = Source.AGENT
    low = record([signal(source=agent, count=1.0000058)], {})
    assert len(low.entries) == 1
    assert record([signal(source=agent, count=1.000353)], low.seen).entries == ()
    (again,) = record([signal(source=agent, count=2.000706)], low.seen).entries
    assert again.xid == 48
