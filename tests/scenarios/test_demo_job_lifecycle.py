"""Jobs as Kubernetes runs them, end to end in the demo: a hung evidence Job ends in one
human verdict with its reason; a hung burn-in is one failed burn-in, recorded on the node and
in the ledger, never rerun on the same boot. A hung pod (stuck in the dead GPU's driver) stays
Terminating until its node restarts, so its Job stays at FailureTarget and no TTL deletes it
(Kubernetes 1.31+, seen on the real control plane: docs/real-control-plane.md)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuguard.demo import harness, score
from gpuguard.model import annotation_keys, settings
from gpuguard.sim import scenario
from tests.admission import IMAGE, failed_rules


def played(name: str) -> tuple[harness.ScenarioRun, dict[str, Any]]:
    guard = settings.GuardSettings.load(None, {"GPUGUARD_CONTROLLER__IMAGE": IMAGE})
    run = harness.play(scenario.load_shipped(name), guard)
    return run, score.scenario_report(run)


@pytest.fixture(scope="module")
def evidence_hangs() -> tuple[harness.ScenarioRun, dict[str, Any]]:
    return played("evidence-job-hangs")


@pytest.fixture(scope="module")
def burnin_hangs() -> tuple[harness.ScenarioRun, dict[str, Any]]:
    return played("burnin-hangs")


def test_a_hung_evidence_job_is_one_human_verdict_with_its_reason(
    evidence_hangs: tuple[harness.ScenarioRun, dict[str, Any]],
) -> None:
    run, report = evidence_hangs
    assert report["verdicts"] == {"gpu-node-b": ["human-diagnosis"]}
    assert [(line["xid"], line["verdict"], line["confirmation"]) for line in report["ledger"]] == [
        (79, None, "confirmed-by-kernel-log"),  # the fault, by the tick its condition woke
        (79, "human-diagnosis", "observed"),  # the isolation: no evidence confirmed it
    ]
    starts = [e for e in report["timeline"] if e["kind"] == "evidence_job"]
    assert len(starts) == 1  # never started again
    node = run.played.store.get("Node", "", "gpu-node-b")
    request = node["metadata"]["annotations"][annotation_keys.REQUEST]
    assert "Evidence unavailable (DeadlineExceeded" in request
    # Its pod hangs in the dead GPU's driver for the 8 days (nobody power-cycles the node):
    # the Job stays decided, never Failed, so its TTL never starts.
    (job,) = run.played.store.list("Job", "gpuguard")
    assert [c["type"] for c in job["status"]["conditions"]] == ["FailureTarget"]


def test_a_hung_burnin_fails_once_and_only_a_new_boot_runs_it_again(
    burnin_hangs: tuple[harness.ScenarioRun, dict[str, Any]],
) -> None:
    run, report = burnin_hangs
    kinds = [(line["kind"], line["verdict"]) for line in report["ledger"]]
    assert kinds == [
        ("xid", None),  # the agent's condition: its Xid series later is the same fault
        ("xid", "power-cycle"),
        ("burnin_failed", None),
    ]
    failed = [e for e in report["timeline"] if e["reason"] == "burn-in-failed"]
    assert "DeadlineExceeded" in failed[0]["detail"]
    started = [e for e in report["timeline"] if e["reason"] == "return-conditions-met"]
    day = 86400
    assert [e["t"] < day for e in started] == [True, False]  # first boot, then day 8's boot
    assert report["returned"] == ["gpu-node-b"]
    assert report["time_to_return_s"]["gpu-node-b"][0] < 15 * 60
    # The first Job failed only when day 8's power cycle ended its hung pod; its 7-day TTL
    # runs from then, so it is still there beside the second.
    first, second = sorted(run.played.store.list("Job", "gpuguard"),
                           key=lambda job: job["metadata"]["creationTimestamp"])
    assert [c["type"] for c in first["status"]["conditions"]] == ["FailureTarget", "Failed"]
    assert failed_rules(second) == []
