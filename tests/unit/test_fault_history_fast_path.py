"""The tick a node condition wakes records the fault it isolates (docs/design.md#fast-path):
one ledger line with the card, slot and Xid the condition names, stored before the tick ends.
The same fault reaching Prometheus later, or a restarted controller, adds no line; a line the
woken tick could not store is written after a restart; a new fall is a new line."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import pytest

from gpuguard.controller import fault_history, tick
from gpuguard.errors import GpuguardError
from gpuguard.model import faults, fleet, settings
from gpuguard.model import node_conditions as nc
from tests import fakes
from tests.builders import Classifier
from tests.tick_world import FELL, NOW, PCI, UUID, gone_from_bus, healthy, xid79_series

SOURCES = ["agent", "dcgm-count", "dcgm-gauge"]
FIRST_LINE = faults.LedgerEntry(
    at=FELL, node="gpu-node-b", xid=79, pci=PCI, uuid=UUID, recorder=faults.Recorder.GPUGUARD,
    kind=faults.FaultKind.XID, confirmation=faults.Confirmation.KERNEL_LOG,
)  # fmt: skip


class World:
    """The fleet the guard reads, its fault ledger and its clock; ``restart`` is a new
    controller process (nothing kept in memory) on the same cluster and ledger."""

    def __init__(self, node: fleet.Node) -> None:
        self.cluster = fakes.FakeCluster([healthy(), node])
        self.metrics = fakes.FakeMetrics()
        self.ledger = fakes.FakeLedger()  # keeps every line appended: a duplicate shows
        self.clock = fakes.FakeClock(NOW)
        self.writer = fakes.FakeWriter()
        self.guard = self.restart()

    def restart(self) -> tick.Guard:
        catalog = Classifier()
        history = fault_history.FaultHistory(self.ledger, catalog, timedelta(hours=24))  # type: ignore[arg-type]
        self.guard = tick.Guard(
            metrics=self.metrics, cluster=self.cluster, writer=self.writer,
            classifier=Classifier(), settings=settings.GuardSettings(), clock=self.clock,
            history=history,
        )  # fmt: skip
        return self.guard

    def later(self, delta: timedelta, node: fleet.Node, series: list[fleet.MetricSample]) -> None:
        self.clock.step(delta)
        self.cluster.node_list = [healthy(), node]
        self.metrics.series = series


def test_the_woken_tick_records_the_conditions_fault_with_its_card_slot_and_xid(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World(gone_from_bus())
    with caplog.at_level(logging.INFO, logger=fault_history.__name__):
        result = world.guard.tick(urgent=True)
    assert [name for name, _ in world.writer.isolated] == ["gpu-node-b"]
    assert world.ledger.lines == [FIRST_LINE]  # stored before the woken tick returned
    assert result.history.recorded == (FIRST_LINE,)
    assert "seen in node/gpu-node-b condition GpuFallenOffBus" in caplog.text


@pytest.mark.parametrize("source", SOURCES)
def test_the_xid_series_a_scrape_later_is_the_same_fault(source: str) -> None:
    world = World(gone_from_bus())
    world.guard.tick(urgent=True)
    later = NOW + timedelta(seconds=30)
    world.later(timedelta(seconds=30), gone_from_bus(allocatable=7), xid79_series(source, later))
    assert world.guard.tick().history.recorded == ()
    world.later(timedelta(minutes=10), gone_from_bus(allocatable=7), xid79_series(source, later))
    world.guard.tick()
    assert world.ledger.lines == [FIRST_LINE]


def test_a_condition_naming_no_xid_and_the_gauges_xid_79_later_are_one_fault() -> None:
    world = World(gone_from_bus(xid=None))
    world.guard.tick(urgent=True)
    (line,) = world.ledger.lines
    assert (line.kind, line.xid, line.uuid) == (faults.FaultKind.FALLEN_OFF_BUS, None, UUID)
    later = NOW + timedelta(seconds=30)
    world.later(timedelta(seconds=30), gone_from_bus(xid=None, allocatable=7),
                xid79_series("dcgm-gauge", later))  # fmt: skip
    world.guard.tick()
    assert world.ledger.lines == [line]


@pytest.mark.parametrize("source", [None, *SOURCES])
def test_a_restart_right_after_the_woken_tick_neither_loses_nor_repeats_the_line(
    source: str | None,
) -> None:
    world = World(gone_from_bus())
    world.guard.tick(urgent=True)
    world.restart()
    later = NOW + timedelta(seconds=5)
    world.later(timedelta(seconds=5), gone_from_bus(allocatable=7),
                xid79_series(source, later) if source else [])  # fmt: skip
    world.guard.tick()
    assert world.ledger.lines == [FIRST_LINE]


def test_a_card_off_the_bus_for_days_is_one_fault_across_a_restart() -> None:
    """The Xid series left the 24 h lookback long ago; the condition still stands."""
    world = World(gone_from_bus())
    world.guard.tick(urgent=True)
    world.restart()
    world.later(timedelta(days=3), gone_from_bus(allocatable=7), [])
    world.guard.tick()
    assert world.ledger.lines == [FIRST_LINE]


def test_a_line_the_woken_tick_could_not_store_is_written_after_a_restart() -> None:
    world = World(gone_from_bus())
    world.ledger.error = GpuguardError("ledger ConfigMap: 409 three times")
    assert world.guard.tick(urgent=True).history.recorded == ()
    world.ledger.error = None
    world.restart()  # the controller crashed: the pending line was only in its memory
    world.later(timedelta(seconds=30), gone_from_bus(allocatable=7), [])
    (line,) = world.guard.tick().history.recorded
    assert (line.at, line.xid, line.uuid, line.pci, line.confirmation) == (
        FELL, 79, UUID, PCI, faults.Confirmation.KERNEL_LOG)  # fmt: skip  # written 30 s late
    assert world.ledger.lines == [line]


def test_the_same_card_falling_again_after_a_repair_is_a_second_line() -> None:
    world = World(gone_from_bus())
    world.guard.tick(urgent=True)
    world.later(timedelta(hours=2), healthy("gpu-node-b"), [])  # power-cycled: back on the bus
    world.guard.tick()
    again: datetime = NOW + timedelta(hours=3)
    world.later(timedelta(hours=1), gone_from_bus(since=again - timedelta(seconds=1)), [])
    world.guard.tick(urgent=True)
    # each line has the time its fall happened (the condition's transition), not the tick's
    assert [line.at for line in world.ledger.lines] == [FELL, again - timedelta(seconds=1)]


def test_a_condition_naming_the_card_by_slot_only_and_the_gauge_later_are_one_fault() -> None:
    """The agent could not read the fallen card's UUID: its condition names the slot only;
    dcgm-exporter's gauge names the card by UUID and slot."""
    named = nc.GpuNamed("4", PCI, None, 79)
    text = nc.message((named,), "the kernel said the GPU fell off the bus")
    fallen = nc.GpuCondition(nc.GPU_FALLEN_OFF_BUS, "True", nc.GONE_FROM_BUS, text, FELL)
    node = fleet.Node("gpu-node-b", "boot-b", 8, 8, conditions={"Ready": "True"},
                      gpu_conditions={fallen.type: fallen})  # fmt: skip
    world = World(node)
    world.guard.tick(urgent=True)
    (line,) = world.ledger.lines
    assert (line.xid, line.uuid, line.pci) == (79, None, PCI)
    later = NOW + timedelta(seconds=30)
    world.later(timedelta(seconds=30), node, xid79_series("dcgm-gauge", later))
    assert world.guard.tick().history.recorded == ()
    assert world.ledger.lines == [line]
