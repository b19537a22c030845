"""The fast path's woken tick goes through the same storm breaker as every tick
(docs/design.md#fast-path, docs/breaker.md): with the breaker at its limit, a GPU the real
agent reports gone from the bus wakes a tick that withholds the fault instead of cordoning."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from gpuguard.model import annotation_keys, decisions
from tests.integration import agent_fleet as af

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def one_allowed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[af.AgentFleet]:
    """A fleet whose breaker lets one unconfirmed isolation start, and be out, at a time."""
    chosen = af.hourly(breaker_rate_min=1, breaker_level_min=1)
    workdir = tmp_path_factory.mktemp("fleet")
    with af.running(workdir, nodes=2, gpus=5, guard_settings=chosen) as fleet:
        yield fleet


def test_a_woken_tick_withholds_the_fault_when_the_breaker_is_at_its_limit(
    one_allowed: af.AgentFleet,
) -> None:
    fleet = one_allowed
    first = fleet.fall_off_bus("gpu-000")
    assert fleet.watch.first("gpu-000", af.cordoned, first, af.WAIT_S) is not None
    fleet.fall_off_bus("gpu-001")
    woken = fleet.loop.wait_for_tick(af.saw_gone_from_bus("gpu-001"))
    assert woken is not None, "no tick saw the second node's condition"
    result, urgent = woken
    assert urgent
    isolated = [a.node for a in result.applied if a.kind is decisions.ActionKind.ISOLATE]
    assert "gpu-001" not in isolated
    node = fleet.node("gpu-001")
    assert not af.cordoned(node)
    mark = json.loads(node["metadata"]["annotations"][annotation_keys.WITHHELD])
    assert mark["fault"] == "xid-79"
    assert fleet.loop.urgent_ticks() == 2
