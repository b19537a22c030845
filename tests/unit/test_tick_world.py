"""One tick, one world: the fault ledger is read once a tick (again only after a write), the Xid
signals are computed once, and the steps run in the order ``steps.shipped`` lists them — a
step added there by one line runs, on the same world as the others."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from gpuguard.actuators import ledger as ledger_store
from gpuguard.controller import fault_history, steps, tick, tick_ledger
from gpuguard.controller.world import TickWorld
from gpuguard.errors import SourceError
from gpuguard.model import settings
from gpuguard.policy import xid_signals
from tests import fakes
from tests.builders import Classifier
from tests.tick_world import NOW, gone_from_bus, healthy


@dataclass
class CountedLedger(fakes.FakeLedger):
    reads: int = 0

    def entries(self) -> ledger_store.LedgerRead:
        self.reads += 1
        return super().entries()


def guard(store: CountedLedger, **overrides: Any) -> tick.Guard:
    shared = tick_ledger.TickLedger(store)
    parts: dict[str, Any] = {
        "metrics": fakes.FakeMetrics(),
        "cluster": fakes.FakeCluster([healthy(), gone_from_bus()]),
        "writer": fakes.FakeWriter(),
        "classifier": Classifier(),
        "settings": settings.GuardSettings(),
        "clock": fakes.FakeClock(NOW),
        "ledger": shared,
        "history": fault_history.FaultHistory(shared, Classifier(), timedelta(hours=24)),  # type: ignore[arg-type]
    }
    parts.update(overrides)
    return tick.Guard(**parts)


def test_the_tick_ledger_reads_once_and_again_only_after_a_write_or_a_new_tick() -> None:
    store = CountedLedger()
    shared = tick_ledger.TickLedger(store)
    assert shared.entries() is shared.entries()
    assert store.reads == 1
    shared.append("a line")
    assert shared.entries().entries == ["a line"]  # the step sees its own line
    assert store.reads == 2
    shared.begin()
    shared.entries()
    assert store.reads == 3


@dataclass
class BrokenLedger(CountedLedger):
    def entries(self) -> ledger_store.LedgerRead:
        self.reads += 1
        raise SourceError("ConfigMaps: HTTP 503")


def test_a_failed_read_is_not_kept_the_next_reader_tries_again() -> None:
    store = BrokenLedger()
    shared = tick_ledger.TickLedger(store)
    for _ in range(2):
        with pytest.raises(SourceError, match="503"):
            shared.entries()
    assert store.reads == 2


def test_a_writing_tick_reads_the_ledger_once_before_its_write() -> None:
    store = CountedLedger()
    g = guard(store)
    result = g.tick(urgent=True)
    assert [name for name, _ in g.writer.isolated] == ["gpu-node-b"]  # type: ignore[attr-defined]
    assert len(result.history.recorded) == 1  # a write
    assert store.reads == 1  # read before the write, not again after it


@dataclass
class Reader:
    """A step that reads the tick's ledger, and appends to it when given a line."""

    line: str | None = None

    def run(self, world: TickWorld, result: tick.TickResult) -> None:
        assert world.ledger is not None
        world.ledger.entries()
        if self.line is not None:
            assert isinstance(world.ledger, tick_ledger.TickLedger)
            world.ledger.append(self.line)


@pytest.mark.parametrize(
    ("dry_run", "reads"),
    [
        pytest.param(True, [1, 1], id="dry-run"),
        pytest.param(False, [2, 1], id="first-tick-writes-a-ledger-line"),
    ],
)
def test_steps_share_one_read_a_tick_and_each_tick_reads_afresh(
    dry_run: bool, reads: list[int]
) -> None:
    store = CountedLedger()
    g = guard(store, dry_run=dry_run, steps=lambda g: (*steps.shipped(g), Reader(), Reader()))
    for expected in reads:
        before = store.reads
        g.tick(urgent=True)
        assert store.reads - before == expected


def test_a_step_after_a_write_reads_the_ledger_again() -> None:
    store = CountedLedger()
    g = guard(store, steps=lambda g: (Reader(), Reader("a line"), Reader(), Reader()))
    g.tick()
    assert store.reads == 2


def test_the_signals_are_computed_once_a_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    computed = xid_signals.all_signals

    def counted(*args: Any) -> Any:
        calls.append(args)
        return computed(*args)

    monkeypatch.setattr(xid_signals, "all_signals", counted)
    result = guard(CountedLedger()).tick(urgent=True)
    assert len(result.history.recorded) == 1  # fault history ran on them
    assert len(calls) == 1


@dataclass
class Probe:
    name: str
    seen: list[tuple[str, TickWorld]] = field(default_factory=list)

    def run(self, world: TickWorld, result: tick.TickResult) -> None:
        self.seen.append((self.name, world))


def test_the_steps_run_in_order_on_one_world() -> None:
    seen: list[tuple[str, TickWorld]] = []
    probes = [Probe(name, seen) for name in ("first", "second", "third")]
    guard(CountedLedger(), steps=lambda g: probes).tick()
    assert [name for name, _ in seen] == ["first", "second", "third"]
    assert len({id(world) for _, world in seen}) == 1


def test_the_shipped_steps_in_their_order() -> None:
    names = [type(s).__name__ for s in steps.shipped(guard(CountedLedger()))]
    assert names == ["Isolate", "GpuIsolation", "Freshness", "Recovery", "Remediation",
                     "ReturnToPool", "Changes", "FleetHealth", "FitnessLabel"]  # fmt: skip


def test_a_step_added_by_one_line_runs_after_the_others_on_their_result() -> None:
    probe = Probe("added")
    result = guard(CountedLedger(), steps=lambda g: (*steps.shipped(g), probe)).tick()
    assert [name for name, _ in probe.seen] == ["added"]
    assert result.decision is not None  # the shipped steps ran first
    world = probe.seen[0][1]
    assert world.now == result.at
    assert world.snapshot is result.snapshot
