"""Recovery end to end in the simulator: Xid 79 → isolated → evidence Job pinned to the node
(admitted by the admission policy) → the real collector reads the node's host tree →
verdict → ledger line with the card's escalation → verdict and drafted request on the node."""

from __future__ import annotations

from typing import Any

import pytest

from gpuguard.demo import harness, score
from gpuguard.model import annotation_keys, settings
from tests import demo_runs
from tests.admission import IMAGE, failed_rules


@pytest.fixture(scope="module")
def xid79_twice() -> harness.ScenarioRun:
    guard = settings.GuardSettings.load(None, {"GPUGUARD_CONTROLLER__IMAGE": IMAGE})
    return demo_runs.play("xid79-twice", guard)


def test_each_fall_gets_a_power_cycle_verdict_and_one_ledger_line(
    xid79_twice: harness.ScenarioRun,
) -> None:
    report = score.scenario_report(xid79_twice)
    assert report["verdicts"] == {"gpu-node-b": ["power-cycle", "power-cycle"]}
    lines: list[dict[str, Any]] = [line for line in report["ledger"] if line["verdict"]]
    assert [(line["xid"], line["pci"], line["verdict"], line["escalation"]) for line in lines] == [
        (79, "0000:99:00.0", "power-cycle", "none"),
        (79, "0000:99:00.0", "power-cycle", "inspection"),
    ]
    assert len({line["uuid"] for line in lines}) == 1  # the same card
    # each fall was also recorded once when first seen, before any verdict, by the tick the
    # agent's condition woke (the one that isolated it); the agent's Xid and "fallen off the
    # bus" series a scrape later are the same fault, no further line
    seen = [(line["t"], line["fault"], line["confirmation"])
            for line in report["ledger"] if not line["verdict"]]  # fmt: skip
    isolated = [e["t"] for e in report["timeline"] if e["kind"] == "isolate"]
    assert seen == [(t, "xid-79", "confirmed-by-kernel-log") for t in isolated]
    assert len(isolated) == 2


def test_the_evidence_job_is_pinned_and_admitted(xid79_twice: harness.ScenarioRun) -> None:
    evidence_jobs = [
        j
        for j in xid79_twice.played.store.list("Job", "gpuguard")
        if j["metadata"]["labels"].get("gpuguard.io/job") == "evidence"
    ]
    # the first isolation's Job was deleted by its ttlSecondsAfterFinished (7 days) before
    # the card fell off the bus again 11 days later; its verdict lives on the ledger
    assert len(evidence_jobs) == 1
    for job in evidence_jobs:
        assert job["spec"]["template"]["spec"]["nodeName"] == "gpu-node-b"
        assert failed_rules(job) == []


def test_the_node_carries_the_verdict_and_the_request_with_the_cards_history(
    xid79_twice: harness.ScenarioRun,
) -> None:
    node = xid79_twice.played.store.get("Node", "", "gpu-node-b")
    marks = node["metadata"]["annotations"]
    assert marks[annotation_keys.VERDICT] == "power-cycle"
    assert marks[annotation_keys.ESCALATION] == "inspection"
    request = marks[annotation_keys.REQUEST]
    assert "2026-09-10" in request
    assert "2026-09-21" in request
    assert "power" in request.lower()


def test_after_the_power_cycle_the_node_returns_once_every_condition_and_the_burnin_pass(
    xid79_twice: harness.ScenarioRun,
) -> None:
    report = score.scenario_report(xid79_twice)
    assert report["returned"] == ["gpu-node-b"]
    ((seconds,),) = report["time_to_return_s"].values()
    assert 6 * 60 < seconds <= 15 * 60  # boot 6 min, ip_vs reloaded by hand at 10 min, burn-in
    returns = [e for e in report["timeline"] if e["kind"] == "return"]
    assert [(e["node"], e["reason"]) for e in returns] == [("gpu-node-b", "burn-in-passed")]
    burnin_jobs = [
        j
        for j in xid79_twice.played.store.list("Job", "gpuguard")
        if j["metadata"]["labels"].get("gpuguard.io/job") == "burnin"
    ]
    assert burnin_jobs == []  # deleted by its TTL (7 days) before the scenario ends


def test_the_same_card_failing_again_is_held_for_a_human_not_returned(
    xid79_twice: harness.ScenarioRun,
) -> None:
    report = score.scenario_report(xid79_twice)
    assert "card-history" in report["held"]["gpu-node-b"]
    node = xid79_twice.played.store.get("Node", "", "gpu-node-b")
    assert node["spec"]["unschedulable"] is True


def test_ecc_dbe_gets_the_reset_procedure_and_no_return_on_operand_restarts_alone() -> None:
    """The node path (GPU isolation off): the cordoned node's recovery."""
    node_only = settings.GuardSettings.model_validate({"gpu_isolation": {"enabled": False}})
    run = demo_runs.play("ecc-dbe-five", node_only)
    report = score.scenario_report(run)
    assert set(report["verdicts"]["gpu-node-a"]) == {"gpu-reset"}
    assert all(line["xid"] == 48 for line in report["ledger"])
    assert report["returned"] == []
    # every double-bit error the guard saw is in the card's history, on the isolated node too
    (card,) = report["cards"].values()
    assert card["escalation"] == "replacement"
    assert len(report["ledger"]) >= 5
    # the third double-bit error raises the waiting node's request to a replacement at once
    raised = [e for e in report["timeline"] if e["kind"] == "escalated"]
    assert [("failed 3 times" in e["detail"], "replace it" in e["detail"]) for e in raised][1] == (
        True,
        True,
    )
    assert raised[1]["t"] < 4 * 86400
    assert "reset-done" in report["held"]["gpu-node-a"]
