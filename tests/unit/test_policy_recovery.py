"""After isolation: evidence Job, verdict, one ledger line per isolation, the drafted request."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from gpuguard.catalog import xid as xid_catalog
from gpuguard.model import annotation_keys, decisions, evidence, faults, fleet, jobs
from gpuguard.policy import escalation, recovery

NOW = datetime(2026, 9, 21, 6, 10, tzinfo=UTC)
ISOLATED_AT = "2026-09-21T06:05:10Z"
CARD = "GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
SLOT = "0000:99:00.0"


def isolated(verdict: str | None = None) -> fleet.Node:
    marks = {
        annotation_keys.ISOLATED_AT: ISOLATED_AT,
        annotation_keys.REASON: "xid-79",
        annotation_keys.GPU_UUID: CARD,
        annotation_keys.GPU_PCI: "00000000:99:00.0",
    }
    if verdict:
        marks[annotation_keys.VERDICT] = verdict
    return fleet.Node("gpu-node-b", "boot-2", 8, 7, unschedulable=True, annotations=marks)


def summary_json(verdict: decisions.Verdict, advice: str | None = None) -> str:
    return evidence.EvidenceSummary(
        node="gpu-node-b",
        boot_id="boot-2",
        collected_at=NOW,
        verdict=verdict,
        rule=evidence.VerdictRule.CONFIG_SPACE_ALL_FF,
        driver_advice=advice,
        config_all_ff={SLOT: True},
        evidence=(f"sys/bus/pci/devices/{SLOT}/config = all ff",),
    ).to_json()


def manual(day: str) -> faults.LedgerEntry:
    return faults.LedgerEntry(
        at=datetime.fromisoformat(day),
        node="gpu-node-b",
        xid=79,
        pci=SLOT,
        uuid=CARD,
        recorder=faults.Recorder.MANUAL,
    )


CATALOG = xid_catalog.load_catalog()


def decide(job: jobs.JobResult, ledger: list[faults.LedgerEntry]) -> recovery.RecoveryStep:
    return recovery.decide(isolated(), job, ledger, CATALOG, NOW)


def test_no_job_yet_starts_the_evidence_job() -> None:
    step = decide(jobs.JobResult(jobs.JobState.ABSENT), [])
    assert step.start_evidence_job
    assert step.record is None


def test_a_running_job_is_waited_for() -> None:
    step = decide(jobs.JobResult(jobs.JobState.RUNNING), [])
    assert not step.start_evidence_job
    assert step.record is None
    assert step.annotations is None


def test_xid154_says_reset_but_config_ff_records_power_cycle_and_shows_the_advice() -> None:
    job = jobs.JobResult(
        jobs.JobState.SUCCEEDED,
        summary_json(decisions.Verdict.POWER_CYCLE, advice="gpu-reset-required"),
    )
    step = decide(job, [])
    assert step.verdict is decisions.Verdict.POWER_CYCLE
    assert step.record is not None
    assert (step.record.node, step.record.xid, step.record.pci, step.record.uuid) == (
        "gpu-node-b",
        79,
        SLOT,
        CARD,
    )
    assert step.record.recorder is faults.Recorder.GPUGUARD
    assert step.annotations is not None
    assert step.annotations[annotation_keys.VERDICT] == "power-cycle"
    assert any("gpu-reset-required" in e.value for e in step.evidence)


def test_the_cards_third_fault_drafts_a_replacement_request_with_its_history() -> None:
    ledger = [manual("2026-09-10T13:03:59+00:00"), manual("2026-09-15T08:00:00+00:00")]
    job = jobs.JobResult(jobs.JobState.SUCCEEDED, summary_json(decisions.Verdict.POWER_CYCLE))
    step = decide(job, ledger)
    assert step.escalation is escalation.Escalation.REPLACEMENT
    assert "2026-09-10" in step.request
    assert "2026-09-15" in step.request
    assert "2026-09-21" in step.request


@pytest.mark.parametrize(
    "job",
    [
        pytest.param(jobs.JobResult(jobs.JobState.FAILED, detail="DeadlineExceeded"), id="failed"),
        pytest.param(jobs.JobResult(jobs.JobState.SUCCEEDED, "{not json"), id="garbage"),
        pytest.param(jobs.JobResult(jobs.JobState.SUCCEEDED, None), id="empty-message"),
    ],
)
def test_no_usable_evidence_still_records_the_fault_for_a_human(job: jobs.JobResult) -> None:
    step = decide(job, [])
    assert step.verdict is decisions.Verdict.HUMAN_DIAGNOSIS
    assert step.record is not None
    assert step.evidence


def test_a_second_pass_after_a_crash_does_not_record_twice() -> None:
    job = jobs.JobResult(jobs.JobState.SUCCEEDED, summary_json(decisions.Verdict.POWER_CYCLE))
    first = decide(job, [])
    assert first.record is not None
    again = decide(job, [first.record])
    assert again.record is None
    assert again.annotations == first.annotations


def test_only_isolated_nodes_without_a_verdict_need_recovery() -> None:
    assert recovery.needs_recovery(isolated())
    assert not recovery.needs_recovery(isolated(verdict="power-cycle"))
    human = fleet.Node("gpu-node-a", "b", 8, 8, unschedulable=True)
    assert not recovery.needs_recovery(human)


def test_the_isolation_line_says_whether_the_evidence_confirmed_the_fault() -> None:
    found = decide(
        jobs.JobResult(jobs.JobState.SUCCEEDED, summary_json(decisions.Verdict.POWER_CYCLE)), []
    )
    assert found.record is not None
    assert found.record.confirmation is faults.Confirmation.EVIDENCE
    unsure = decide(jobs.JobResult(jobs.JobState.SUCCEEDED, "{not json"), [])
    assert unsure.record is not None
    assert unsure.record.confirmation is faults.Confirmation.OBSERVED


def test_a_fault_first_seen_at_the_isolation_instant_does_not_hide_the_isolation_line() -> None:
    seen = faults.LedgerEntry(
        datetime.fromisoformat(ISOLATED_AT),
        "gpu-node-b",
        79,
        SLOT,
        CARD,
        faults.Recorder.GPUGUARD,
        confirmation=faults.Confirmation.DEVICE_PLUGIN,
    )
    job = jobs.JobResult(jobs.JobState.SUCCEEDED, summary_json(decisions.Verdict.POWER_CYCLE))
    step = decide(job, [seen])
    assert step.record is not None
    assert step.escalation is escalation.Escalation.NONE  # one occurrence, not two


def test_a_phantom_cordon_is_never_a_hardware_fault_in_the_ledger() -> None:
    node = isolated()
    marks = dict(node.annotations) | {annotation_keys.REASON: "phantom-utilization"}
    phantom = fleet.Node("gpu-node-b", "boot-2", 8, 8, unschedulable=True, annotations=marks)
    job = jobs.JobResult(jobs.JobState.SUCCEEDED, "{not json")
    step = recovery.decide(phantom, job, [], CATALOG, NOW)
    assert step.record is None
    assert step.annotations == {annotation_keys.VERDICT: "human-diagnosis"}


def test_a_job_past_its_deadline_records_evidence_unavailable_for_a_human() -> None:
    detail = "DeadlineExceeded: Job was active longer than specified deadline; its pods are gone"
    step = decide(jobs.JobResult(jobs.JobState.FAILED, None, detail=detail), [])
    assert step.verdict is decisions.Verdict.HUMAN_DIAGNOSIS
    assert step.record is not None
    assert step.evidence[0].value == f"evidence unavailable ({detail})"
    assert not step.start_evidence_job


def test_a_started_job_that_is_gone_is_a_result_never_a_second_job() -> None:
    node = isolated()
    started = fleet.Node(
        node.name, node.boot_id, 8, 7, unschedulable=True,
        annotations={**node.annotations, annotation_keys.EVIDENCE_STARTED: ISOLATED_AT},
    )
    first = decide(jobs.JobResult(jobs.JobState.ABSENT), [])
    gone = recovery.decide(started, jobs.JobResult(jobs.JobState.ABSENT), [], CATALOG, NOW)
    assert first.started_mark == {annotation_keys.EVIDENCE_STARTED: ISOLATED_AT}
    assert not gone.start_evidence_job
    assert gone.verdict is decisions.Verdict.HUMAN_DIAGNOSIS
    assert gone.record is not None
    assert "evidence unavailable (the evidence Job is gone" in gone.evidence[0].value


def seen_by_gpuguard(before: timedelta, xid: int = 79) -> faults.LedgerEntry:
    """gpuguard's first-sighting line of the isolated card's fault, ``before`` the isolation."""
    return faults.LedgerEntry(
        datetime.fromisoformat(ISOLATED_AT) - before, "gpu-node-b", xid, SLOT, CARD,
        faults.Recorder.GPUGUARD, confirmation=faults.Confirmation.KERNEL_LOG,
    )  # fmt: skip


POWER_CYCLED = jobs.JobResult(jobs.JobState.SUCCEEDED, summary_json(decisions.Verdict.POWER_CYCLE))


@pytest.mark.parametrize(
    "before",
    [timedelta(minutes=28), timedelta(hours=6)],
    ids=["isolated-past-the-merge-window", "controller-started-six-hours-late"],
)
def test_the_isolation_line_has_its_faults_time_and_joins_its_occurrence(
    before: timedelta,
) -> None:
    """The fault first seen long before its isolation (a late controller, a withheld fault):
    the isolation's line carries the fault's time, so the two lines are one fault, not two,
    whatever the merge window."""
    seen = seen_by_gpuguard(before)
    step = decide(POWER_CYCLED, [seen])
    assert step.record is not None
    assert step.record.at == seen.at
    assert step.escalation is escalation.Escalation.NONE
    again = decide(POWER_CYCLED, [seen, step.record])
    assert again.record is None  # its own line is found again: written once


@pytest.mark.parametrize(
    ("ledger", "why"),
    [
        ([], "no line of the fault"),
        ([seen_by_gpuguard(timedelta(hours=25))], "first seen before the Xid lookback"),
        ([seen_by_gpuguard(timedelta(minutes=5), xid=48)], "another fault of the card"),
        ([manual("2026-09-21T05:00:00+00:00")], "a person's line is a fault of its own"),
    ],
    ids=["no-first-line", "outside-the-lookback", "another-fault", "manual-line"],
)
def test_the_isolation_line_keeps_the_isolations_time_without_its_faults_line(
    ledger: list[faults.LedgerEntry], why: str
) -> None:
    step = decide(POWER_CYCLED, ledger)
    assert step.record is not None
    assert step.record.at == datetime.fromisoformat(ISOLATED_AT), why


def test_a_new_fall_after_an_earlier_isolation_joins_its_own_first_line() -> None:
    """The card fell, was isolated and returned (its verdict line), and fell again: the new
    isolation's line joins the new fall's first line, not the earlier fall's: the card's
    second fault."""
    earlier = seen_by_gpuguard(timedelta(hours=3))
    verdict = dataclasses.replace(earlier, verdict=decisions.Verdict.POWER_CYCLE)
    again = seen_by_gpuguard(timedelta(minutes=1))
    step = decide(POWER_CYCLED, [earlier, verdict, again])
    assert step.record is not None
    assert step.record.at == again.at
    assert step.escalation is escalation.Escalation.INSPECTION
