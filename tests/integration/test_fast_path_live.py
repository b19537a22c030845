"""The fast path end to end with every part real and running at once (docs/design.md#fast-path):
a kernel line written to a node's log → the real agent patches ``GpuFallenOffBus/GpuGoneFromBus``
onto its Node → the controller's watch sees it → a woken tick cordons through the breaker.
The loop ticks once an hour, so what happens within the test came from a wake; the tests wait
on the API server's stored changes and on the loop's ticks, never on time."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from gpuguard.agent import conditions
from gpuguard.controller import tick
from gpuguard.model import annotation_keys, decisions
from gpuguard.model import node_conditions as nc
from gpuguard.model import settings as settings_model
from gpuguard.sources import watched_cluster
from tests.integration import agent_fleet as af

pytestmark = pytest.mark.integration

HOURLY = settings_model.ControllerSettings(interval=timedelta(hours=1))


def fleet_with(tmp_path: Path, **isolation: object) -> Iterator[af.AgentFleet]:
    chosen = settings_model.GuardSettings(
        controller=HOURLY, isolation=settings_model.IsolationSettings(**isolation)
    )
    with af.running(tmp_path, nodes=3, guard_settings=chosen) as fleet:
        yield fleet


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[af.AgentFleet]:
    yield from fleet_with(tmp_path)


@pytest.fixture
def one_allowed(tmp_path: Path) -> Iterator[af.AgentFleet]:
    """A fleet whose breaker lets one unconfirmed isolation start, and be out, at a time."""
    yield from fleet_with(tmp_path, breaker_rate_min=1, breaker_level_min=1)


def saw_condition(node: str) -> af.TickDone:
    """A tick whose snapshot held ``node`` carrying the agent's gone-from-bus condition."""
    def done(result: tick.TickResult, _urgent: bool) -> bool:
        nodes = result.snapshot.nodes if result.snapshot is not None else ()
        return any(n.name == node and nc.unambiguous_fault(n.gpu_conditions) for n in nodes)

    return done


def test_a_gpu_off_the_bus_is_reported_by_the_agent_and_cordoned_by_a_woken_tick(
    fleet: af.AgentFleet,
) -> None:
    written = fleet.fall_off_bus("gpu-001")
    reported = fleet.watch.first("gpu-001", af.gone_from_bus, written, af.WAIT_S)
    isolated = fleet.watch.first("gpu-001", af.cordoned, written, af.WAIT_S)
    assert reported is not None, "the agent never reported the GPU gone from the bus"
    assert isolated is not None, "the node was never cordoned"
    assert written < reported < isolated
    woken = fleet.loop.wait_for_tick(saw_condition("gpu-001"))
    assert woken is not None
    result, urgent = woken
    assert urgent  # the hourly tick is an hour away: a wake made this one
    assert [a.node for a in result.applied] == ["gpu-001"]
    marks = fleet.node("gpu-001")["metadata"]["annotations"]
    assert marks[annotation_keys.REASON] == "xid-79"
    fallen = af.condition(fleet.node("gpu-001"), nc.GPU_FALLEN_OFF_BUS)
    assert fallen is not None
    assert "gpu=4" in fallen["message"]
    assert not any(af.cordoned(fleet.node(n)) for n in ("gpu-000", "gpu-002"))


def test_a_woken_tick_withholds_the_fault_when_the_breaker_is_at_its_limit(
    one_allowed: af.AgentFleet,
) -> None:
    fleet = one_allowed
    first = fleet.fall_off_bus("gpu-000")
    assert fleet.watch.first("gpu-000", af.cordoned, first, af.WAIT_S) is not None
    fleet.fall_off_bus("gpu-002")
    woken = fleet.loop.wait_for_tick(saw_condition("gpu-002"))
    assert woken is not None, "no tick saw the second node's condition"
    result, urgent = woken
    assert urgent
    isolated = [a.node for a in result.applied if a.kind is decisions.ActionKind.ISOLATE]
    assert "gpu-002" not in isolated
    node = fleet.node("gpu-002")
    assert not af.cordoned(node)
    mark = json.loads(node["metadata"]["annotations"][annotation_keys.WITHHELD])
    assert mark["fault"] == "xid-79"
    assert fleet.loop.urgent_ticks() == 2


def test_a_card_that_still_answers_is_reported_but_wakes_nothing(fleet: af.AgentFleet) -> None:
    written = fleet.fall_off_bus("gpu-002", card_answers=True)
    reported = fleet.watch.first("gpu-002", af.said_fallen_off, written, af.WAIT_S)
    assert reported is not None, "the agent never reported what the kernel said"
    fallen = af.condition(fleet.node("gpu-002"), nc.GPU_FALLEN_OFF_BUS)
    assert fallen is not None
    assert fallen["reason"] == conditions.FELL_OFF_ANSWERS
    # the controller's cache handles changes in order: once it holds a later write, the
    # condition's change hook has run
    fleet.objects.merge_patch("Node", "", "gpu-000", {"metadata": {"labels": {"later": "1"}}})
    assert isinstance(fleet.guard.cluster, watched_cluster.WatchedCluster)
    cache = fleet.guard.cluster.node_cache
    assert cache.wait_until(
        lambda: any(n.labels.get("later") for n in cache.values()), af.WAIT_S
    )
    assert fleet.loop.counter("gpuguard_urgent_wakes_total") == 0
    assert len(fleet.loop.ticks) == 1  # the first tick only: nothing woke another
    assert not af.cordoned(fleet.node("gpu-002"))
