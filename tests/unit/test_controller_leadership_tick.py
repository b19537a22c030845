"""Leadership that holds through a tick: a tick longer than the renew deadline keeps its
writes while the Lease is really held (renewed before the write), and a write skipped
because the Lease moved on is logged and counted."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from gpuguard.controller import leader, runner, telemetry, tick
from gpuguard.model import fleet, settings
from tests import fakes
from tests import tick_world as ticks
from tests.builders import Classifier
from tests.leases import FakeLeases, FakeTime, record


@dataclass
class SlowCluster:
    """The LIST of every pod takes ``seconds`` (a big cluster, a slow API server)."""

    cluster: fakes.FakeCluster
    clock: FakeTime
    seconds: float

    def nodes(self) -> tuple[fleet.Node, ...]:
        return self.cluster.nodes()

    def pods(self) -> tuple[fleet.Pod, ...]:
        self.clock.advance(self.seconds)
        return self.cluster.pods()


def loop(leases: FakeLeases, clock: FakeTime) -> tuple[runner.Runner, fakes.FakeWriter]:
    elector = leader.LeaseElector(
        leases, "gpuguard-0", lease_duration=timedelta(seconds=15),
        renew_deadline=timedelta(seconds=10), retry_period=timedelta(seconds=2),
        monotonic=clock.monotonic, wall=clock.wall,
    )  # fmt: skip
    cluster, metrics = ticks.xid79_world()
    writer = fakes.FakeWriter()
    guard_metrics = telemetry.GuardMetrics()
    guard = tick.Guard(
        metrics=metrics, cluster=SlowCluster(cluster, clock, 12), writer=writer,
        classifier=Classifier(), settings=settings.GuardSettings(),
        clock=fakes.FakeClock(ticks.NOW), is_leader=runner.WriteGate(elector, guard_metrics),
    )  # fmt: skip
    return runner.Runner(
        guard, elector, guard_metrics, interval=timedelta(seconds=30), monotonic=clock.monotonic
    ), writer


def skipped(metrics: telemetry.GuardMetrics) -> float:
    return metrics.registry.get_sample_value("gpuguard_writes_skipped_total") or 0.0


def test_a_12_second_tick_keeps_its_writes() -> None:
    clock, leases = FakeTime(), FakeLeases()
    guard_loop, writer = loop(leases, clock)
    result = guard_loop.step()
    assert result is not None
    assert [name for name, _ in writer.isolated] == ["gpu-node-b"]
    assert result.skipped == []
    assert skipped(guard_loop.metrics) == 0


def test_a_write_after_the_lease_moved_on_is_skipped_logged_and_counted() -> None:
    clock, leases = FakeTime(), FakeLeases()
    guard_loop, writer = loop(leases, clock)
    guard_loop.step()  # leads; isolates gpu-node-b
    writer.isolated.clear()
    leases.put(record("gpuguard-1"))  # another replica holds it (a long GC pause here)
    clock.advance(30)
    guard_loop.guard.cluster.cluster.node_list = [  # type: ignore[attr-defined]
        fleet.Node("gpu-node-b", "boot-b", 8, 7, conditions={"Ready": "True"})]
    result = guard_loop.guard.tick()  # the tick began while this replica still believed it led
    assert writer.isolated == []
    assert [why for _, why in result.skipped] == ["not the leader"]
    assert skipped(guard_loop.metrics) == 1

