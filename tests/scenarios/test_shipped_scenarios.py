"""Every shipped scenario loads, is told in docs/design.md, and runs to the end on simulated time
alone (it never waits on the real clock); the incidents look in the world as they were told."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest

from gpuguard.sim import clock, scenario, store, world

SHIPPED = scenario.shipped_names()
DESIGN = (Path(__file__).resolve().parents[2] / "docs" / "design.md").read_text(encoding="utf-8")


def play(name: str, until: timedelta | None = None) -> world.World:
    spec = scenario.load_shipped(name)
    w = world.World.from_scenario(spec, store.ObjectStore(), clock.SimClock(spec.start))
    w.step_to(spec.end if until is None else until)
    return w


def test_the_promised_scenarios_are_shipped() -> None:
    assert set(SHIPPED) >= {
        "xid79-twice", "ecc-dbe-five", "os-auto-update", "dns-public-upstream",
        "phantom-14-of-32", "user-xid-storm", "driver-upgrade-dip", "mig-reconfig",
        "small-compute-workload", "user-xid13-then-xid79",
    }


def no_real_waiting(seconds: float) -> None:
    raise AssertionError(f"the simulated world slept {seconds}s of real time")


@pytest.mark.parametrize("name", SHIPPED)
def test_each_shipped_scenario_is_told_in_the_docs_says_what_to_expect_and_never_waits(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = scenario.load_shipped(name)
    assert spec.name == name
    assert "docs/design.md#" in spec.description
    assert f"`{name}`" in DESIGN  # the incident or trap it replays is told there
    assert spec.expect.isolate or spec.expect.never_isolate
    monkeypatch.setattr(time, "sleep", no_real_waiting)
    w = play(name)
    w.run(step=timedelta(minutes=5), until=spec.end + timedelta(hours=1))
    assert w.elapsed == spec.end + timedelta(hours=1)
    assert {e.node for e in w.timeline} - {None} <= set(spec.node_names)


@pytest.mark.parametrize("name", [n for n in SHIPPED if scenario.load_shipped(n).expect.isolate])
def test_scenarios_that_expect_isolation_have_a_fault_on_those_nodes(name: str) -> None:
    w = play(name)
    for node in w.scenario.expect.isolate:
        assert w.first_fault_at(node) is not None


def test_xid79_twice_loses_the_same_card_twice_eleven_days_apart() -> None:
    w = play("xid79-twice")
    falls = [e.t for e in w.timeline if e.kind == "xid" and e.node == "gpu-node-b"]
    assert len(falls) == 2
    apart = timedelta(seconds=falls[1] - falls[0])
    assert timedelta(days=10, hours=16) < apart < timedelta(days=11)
    assert w.node("gpu-node-b").gpu(4).pci == "0000:99:00.0"  # the seed's ledger slot


def test_phantom_14_of_32_ends_with_the_seeds_distribution() -> None:
    w = play("phantom-14-of-32")
    phantoms = {n.name: [g.index for g in n.gpus if g.phantom] for n in w.nodes}
    assert phantoms == {"gpu-node-1": [1, 3, 4, 5, 7], "gpu-node-2": [5, 6],
                        "gpu-node-3": [3, 5, 6, 7], "gpu-node-4": [1, 2, 4]}
    assert all(not n.workloads for n in w.nodes)  # no pod holds a phantom GPU


def test_os_auto_update_shows_nvml_mismatch_while_ready_then_ipvs_missing_after_reboot() -> None:
    w = play("os-auto-update", until=timedelta(hours=12))
    worker = w.node("gpu-worker-1")
    assert worker.driver_library != worker.driver_module
    assert worker.ready
    w.step_to(w.scenario.end)
    assert worker.driver_library == worker.driver_module == "580.159.03"
    assert worker.kernel_release == "5.15.0-179-generic"
    assert not worker.ipvs_loaded
    assert w.node("gpu-worker-2").ipvs_loaded


def test_user_xid13_then_xid79_leaves_79_on_the_gauge() -> None:
    w = play("user-xid13-then-xid79")
    gpu = w.node("gpu-node-2").gpu(2)
    assert [code for _, code in gpu.xid_history] == [13, 79]
    assert gpu.xid_last == 79
