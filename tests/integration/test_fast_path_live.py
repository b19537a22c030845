"""The fast path end to end with every part real and running at once (docs/design.md#fast-path):
a kernel line written to a node's log → the real agent patches ``GpuFallenOffBus/GpuGoneFromBus``
onto its Node → the controller's watch sees it → a woken tick cordons through the breaker.
The loop ticks once an hour, so what happens within a test came from a wake; the tests wait
on the API server's stored changes and on the loop's ticks, never on time. One fleet for the
module: each test faults its own nodes, and the breaker lets each test's isolations through.
(The breaker at its limit: test_fast_path_live_breaker.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuguard.actuators import ledger
from gpuguard.agent import conditions
from gpuguard.model import annotation_keys, faults, pci
from gpuguard.model import node_conditions as nc
from gpuguard.sources import watched_cluster
from tests.integration import agent_fleet as af

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[af.AgentFleet]:
    workdir: Path = tmp_path_factory.mktemp("fleet")
    chosen = af.hourly(breaker_rate_min=5, breaker_level_min=5)
    with af.running(workdir, nodes=6, gpus=5, guard_settings=chosen) as running:
        yield running


def test_a_gpu_off_the_bus_is_reported_by_the_agent_and_cordoned_by_a_woken_tick(
    fleet: af.AgentFleet,
) -> None:
    written = fleet.fall_off_bus("gpu-001")
    reported = fleet.watch.first("gpu-001", af.gone_from_bus, written, af.WAIT_S)
    isolated = fleet.watch.first("gpu-001", af.cordoned, written, af.WAIT_S)
    assert reported is not None, "the agent never reported the GPU gone from the bus"
    assert isolated is not None, "the node was never cordoned"
    assert written < reported <= isolated
    woken = fleet.loop.wait_for_tick(af.saw_gone_from_bus("gpu-001"))
    assert woken is not None
    result, urgent = woken
    assert urgent  # the hourly tick is an hour away: a wake made this one
    assert [a.node for a in result.applied] == ["gpu-001"]
    assert fleet.node("gpu-001")["metadata"]["annotations"][annotation_keys.REASON] == "xid-79"
    fallen = af.condition(fleet.node("gpu-001"), nc.GPU_FALLEN_OFF_BUS)
    assert fallen is not None
    assert fallen["message"].startswith("gpu=4 pci=")  # the card, named for the controller
    assert not any(af.cordoned(fleet.node(n)) for n in ("gpu-000", "gpu-002"))


def test_a_card_that_still_answers_is_reported_but_wakes_nothing(fleet: af.AgentFleet) -> None:
    wakes, ticks = fleet.loop.counter("gpuguard_urgent_wakes_total"), len(fleet.loop.ticks)
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
    assert fleet.loop.counter("gpuguard_urgent_wakes_total") == wakes
    assert len(fleet.loop.ticks) == ticks  # nothing woke a tick
    assert not af.cordoned(fleet.node("gpu-002"))


def test_gpus_lost_on_two_nodes_at_once_are_cordoned_by_woken_ticks_one_after_another(
    fleet: af.AgentFleet,
) -> None:
    together = ("gpu-003", "gpu-004")
    rewakes = fleet.loop.counter("gpuguard_urgent_rewakes_total")
    with fleet.loop.held():  # both wakes reach the loop before it ticks: they are one tick
        written = {node: fleet.fall_off_bus(node) for node in together}
        for node, at in written.items():
            assert fleet.loop.wait_woken(node, at) is not None, f"{node} woke nothing"
    for node, at in written.items():
        assert fleet.watch.first(node, af.cordoned, at, af.WAIT_S) is not None, node
    first = fleet.loop.wait_for_tick(lambda r, _: any(a.node in together for a in r.applied))
    assert first is not None
    result, urgent = first
    assert urgent
    (isolated,) = [a.node for a in result.applied]  # one per tick (the default)
    (left,) = result.tick_again
    assert {isolated, left} == set(together)
    again = fleet.loop.wait_for_tick(lambda r, _: any(a.node == left for a in r.applied))
    assert again is not None
    assert again[1]  # ticked at once, not by the hourly tick
    assert fleet.loop.counter("gpuguard_urgent_rewakes_total") == rewakes + 1


def test_the_woken_tick_stores_the_cards_ledger_line_before_any_regular_tick(
    fleet: af.AgentFleet,
) -> None:
    """docs/design.md#fast-path: the tick the condition wakes records the fault it isolates,
    with the card, slot and Xid the agent's message names."""
    assert fleet.guard.history is not None
    before = len(fleet.loop.ticks)
    fleet.fall_off_bus("gpu-005")
    woken = fleet.loop.wait_for_tick(af.saw_gone_from_bus("gpu-005"))
    assert woken is not None, "no tick saw the agent's condition"
    result, _ = woken
    upto = fleet.loop.ticks.index(woken) + 1
    assert all(u for _, u in fleet.loop.ticks[before:upto])  # no regular tick since the fall
    card = fleet.cluster.world.node("gpu-005").gpus[4]
    (line,) = [e for e in result.history.recorded if e.node == "gpu-005"]
    assert (line.xid, line.uuid, line.pci, line.confirmation) == (
        79, card.uuid, pci.try_normalize_pci(card.pci), faults.Confirmation.KERNEL_LOG)  # fmt: skip
    stored = fleet.guard.history.ledger.entries().entries  # the ConfigMaps, read afresh
    assert [ledger.format_line(e) for e in stored if e.node == "gpu-005"] == [
        ledger.format_line(line)]  # fmt: skip
