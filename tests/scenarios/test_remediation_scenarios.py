"""gpuguard's own power cycle in the simulator (docs/remediation.md): the simulated nodes'
BMCs (sim/bmc.py: Redfish ComputerSystem.Reset as the simulator models it) answer the real
controller step; the fault-to-return time before (xid79-twice: a person power-cycles) and
after (xid79-twice-bmc: gpuguard does); two nodes one at a time; a refusing or silent BMC and a
held node end in the person's request."""

from __future__ import annotations

import json

import pytest

from gpuguard.demo import harness, score
from gpuguard.model import annotation_keys as keys
from gpuguard.model import settings
from tests import demo_runs
from tests.admission import IMAGE

POOL = "NVIDIA-GeForce-RTX-5090"
ECC_POOL = "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"  # ecc-dbe-five's nodes
OFF = settings.GuardSettings.load(None, {"GPUGUARD_CONTROLLER__IMAGE": IMAGE})
ON = settings.GuardSettings.load(None, {
    "GPUGUARD_CONTROLLER__IMAGE": IMAGE,
    "GPUGUARD_REMEDIATION__POWER_CYCLE_POOLS": f"{POOL},{ECC_POOL}",
    "GPUGUARD_REMEDIATION__BMC_SECRETS": f"{POOL}=bmc-rtx-5090,{ECC_POOL}=bmc-rtx-pro-6000",
})  # fmt: skip


@pytest.fixture(scope="module")
def before() -> harness.ScenarioRun:
    return demo_runs.play("xid79-twice", OFF)


@pytest.fixture(scope="module")
def after() -> harness.ScenarioRun:
    return demo_runs.play("xid79-twice-bmc", ON)


def test_xid79_fault_to_return_falls_from_days_to_minutes(
    before: harness.ScenarioRun, after: harness.ScenarioRun
) -> None:
    waited = demo_runs.fault_to_return_s(before, "gpu-node-b")
    repaired = demo_runs.fault_to_return_s(after, "gpu-node-b")
    assert 4 * 86400 < waited < 5 * 86400  # a person's power cycle 4 d 20 h after the fall
    assert repaired < 15 * 60  # verdict, drain, gpuguard's power cycle, 6 min boot, burn-in
    assert (round(waited), round(repaired)) == (418021, 601)
    assert demo_runs.events(before, "bmc") == []  # remediation off: nothing from gpuguard


def test_xid79_each_fall_is_power_cycled_once_and_the_second_stays_held(
    after: harness.ScenarioRun,
) -> None:
    cycles = demo_runs.events(after, "bmc", "gpu-node-b")
    assert [e["detail"] for e in cycles] == ["system 1: On -> PowerCycle"] * 2
    done = demo_runs.events(after, "remediation_done", "gpu-node-b")
    verdicts = demo_runs.events(after, "verdict", "gpu-node-b")
    # the first: its training pod evicted a tick after the verdict, the power cycle the next
    assert [d["t"] - v["t"] for d, v in zip(done, verdicts, strict=True)] == [60.0, 30.0]
    (drain,) = demo_runs.events(after, "remediation_drain", "gpu-node-b")
    assert drain["detail"] == "evicting 1 GPU pod(s) first: ml/train-b"
    pods = [p["metadata"]["name"] for p in after.played.store.list("Pod", "ml")]
    assert pods == ["train-llm-a"]  # train-b evicted through the API; gpu-node-a's untouched
    # the second fall: power-cycled, but the card's history (2 faults) holds it for a person
    report = score.scenario_report(after)
    assert report["returned"] == ["gpu-node-b"]
    assert len(after.returned_at["gpu-node-b"]) == 1
    assert "card-history" in after.held["gpu-node-b"]
    assert demo_runs.events(after, "isolate", "gpu-node-a") == []
    # each power cycle is a line of the card on the ledger, never counted as its fault
    lines = [line for cm in after.played.store.list("ConfigMap", "gpuguard")
             for text in (cm.get("data") or {}).values() for line in text.splitlines()]
    assert len([line for line in lines if " power_cycled " in line]) == 2
    (card,) = after.cards.values()
    assert (card["confirmed_faults"], card["escalation"]) == (2, "inspection")


def test_two_nodes_needing_a_power_cycle_go_one_at_a_time() -> None:
    run = demo_runs.play("power-cycle-two-nodes", ON)
    cycles = [(e["t"], e["node"]) for e in demo_runs.events(run, "bmc")]
    returns = {e["node"]: e["t"] for e in demo_runs.events(run, "return")}
    assert [node for _, node in cycles] == ["gpu-node-03", "gpu-node-06"]
    (waited,) = demo_runs.events(run, "remediation_wait")
    assert waited["node"] == "gpu-node-06"
    assert waited["detail"] == ("1 repair(s) in flight, at most 1 (remediation.max_in_flight): "
                                "waits its turn")  # fmt: skip
    # the second power cycle only after the first node returned: never two out at once
    assert returns["gpu-node-03"] <= cycles[1][0]
    assert sorted(returns) == ["gpu-node-03", "gpu-node-06"]


@pytest.fixture(scope="module")
def refused() -> harness.ScenarioRun:
    return demo_runs.play("bmc-refuses-or-held", ON)


@pytest.mark.parametrize(("node", "reason"), [
    ("gpu-node-b", "refused (401)"), ("gpu-node-c", "Read timed out")])  # fmt: skip
def test_a_bmc_that_refuses_or_times_out_ends_in_the_persons_request(
    refused: harness.ScenarioRun, node: str, reason: str
) -> None:
    (tried,) = demo_runs.events(refused, "bmc", node)  # once, never again
    assert reason in tried["detail"]
    (failed,) = demo_runs.events(refused, "remediation_failed", node)
    assert failed["reason"] == "remediation-failed"
    marks = demo_runs.node_marks(refused, node)
    assert marks[keys.REQUEST].startswith("automated power cycle failed (BMC https://bmc-")
    assert reason in marks[keys.REQUEST]
    assert "power-cycle the node by hand." in marks[keys.REQUEST]
    assert json.loads(marks[keys.REMEDIATION])["result"] == "failed"
    assert node not in refused.returned_at


def test_a_held_node_is_never_power_cycled(refused: harness.ScenarioRun) -> None:
    assert refused.verdicts["gpu-node-d"] == ["power-cycle"]
    assert demo_runs.events(refused, "bmc", "gpu-node-d") == []
    assert keys.REMEDIATION not in demo_runs.node_marks(refused, "gpu-node-d")


def test_ecc_dbe_five_with_remediation_on_acts_on_no_held_card() -> None:
    """GPU-level isolations (no node verdict), a pending row remap at the end: nothing for the
    power cycle route (the GPU reset route acts on node verdicts only:
    tests/scenarios/test_gpu_reset_scenarios.py)."""
    run = demo_runs.play("ecc-dbe-five", ON)
    assert demo_runs.events(run, "bmc") == []
    assert [e for e in score.timeline(run) if e["kind"].startswith("remediation")] == []
    assert [g["node"] + "/" + str(g["gpu"]) for g in run.gpu_isolated] == ["gpu-node-a/1"]


def test_a_hand_off_pool_gets_the_node_condition_and_no_power_cycle() -> None:
    """docs/remediation.md#hand-off: the condition through the simulator's API (a strategic
    merge of nodes/status); no remediator runs in the simulator, so the node stays isolated."""
    hand_off = settings.GuardSettings.load(None, {
        "GPUGUARD_CONTROLLER__IMAGE": IMAGE, "GPUGUARD_REMEDIATION__HAND_OFF_POOLS": POOL})
    run = demo_runs.play("xid79-twice-bmc", hand_off)
    assert demo_runs.events(run, "bmc") == []
    conditions = run.played.store.get("Node", "", "gpu-node-b")["status"]["conditions"]
    (handed,) = [c for c in conditions if c["type"] == "GpuguardRemediationRequired"]
    assert (handed["status"], handed["reason"]) == ("True", "PowerCycleRequired")
    marks = demo_runs.node_marks(run, "gpu-node-b")
    assert json.loads(marks[keys.REMEDIATION])["result"] == "published"
    assert "gpu-node-b" not in run.returned_at
