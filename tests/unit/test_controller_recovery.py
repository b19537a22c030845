"""The recovery step applied: Job created once, ledger line then annotation, nothing written
in dry-run or by a standby, a failed write retried next tick."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from gpuguard.actuators import ledger as ledger_store
from gpuguard.errors import GpuguardError
from gpuguard.model import annotation_keys, decisions, evidence, fleet, jobs
from tests.fakes import FakeJobs, FakeLedger
from tests.recovery_builders import isolated_node, make

NOW = datetime(2026, 9, 21, 6, 10, tzinfo=UTC)
VERDICT = annotation_keys.VERDICT






def finished(step_jobs: FakeJobs) -> None:
    name = step_jobs.created[0]["metadata"]["name"]
    message = evidence.EvidenceSummary(
        node="gpu-node-b", boot_id="boot-2", collected_at=NOW,
        verdict=decisions.Verdict.POWER_CYCLE, rule=evidence.VerdictRule.CONFIG_SPACE_ALL_FF,
    ).to_json()
    step_jobs.results[name] = jobs.JobResult(jobs.JobState.SUCCEEDED, message)


def test_job_then_ledger_then_verdict_annotation() -> None:
    rec, step_jobs, book, writer = make()
    rec.run((isolated_node(),), NOW, may_write=lambda: True)
    assert [m["spec"]["template"]["spec"]["nodeName"] for m in step_jobs.created] == [
        "gpu-node-b"]
    finished(step_jobs)
    rec.run((isolated_node(),), NOW, may_write=lambda: True)
    assert [(e.node, e.xid, e.verdict) for e in book.lines] == [
        ("gpu-node-b", 79, decisions.Verdict.POWER_CYCLE)]
    started, (name, marks) = writer.annotated
    job = step_jobs.created[0]["metadata"]["name"]
    assert started == ("gpu-node-b", {annotation_keys.EVIDENCE_STARTED: "2026-09-21T06:05:10Z",
                                      annotation_keys.EVIDENCE_JOB_UID: f"uid-{job}"})
    assert name == "gpu-node-b"
    assert marks[annotation_keys.VERDICT] == "power-cycle"
    assert [a.reason for a in writer.events] == [decisions.Reason.VERDICT_RECORDED]


def test_dry_run_or_standby_writes_nothing() -> None:
    rec, step_jobs, book, writer = make()
    steps = rec.run((isolated_node(),), NOW, may_write=lambda: False)
    assert steps[0].start_evidence_job
    assert (step_jobs.created, book.lines, writer.annotated) == ([], [], [])


def test_a_failed_ledger_write_leaves_no_verdict_so_the_next_tick_retries() -> None:
    rec, step_jobs, book, writer = make(FakeLedger(error=GpuguardError("409 x20")))
    rec.run((isolated_node(),), NOW, may_write=lambda: True)
    finished(step_jobs)
    rec.run((isolated_node(),), NOW, may_write=lambda: True)
    assert [VERDICT in marks for _, marks in writer.annotated] == [False]
    book.error = None
    rec.run((isolated_node(),), NOW, may_write=lambda: True)
    assert len(book.lines) == 1
    assert [VERDICT in marks for _, marks in writer.annotated] == [False, True]


def test_nodes_with_a_verdict_or_a_human_cordon_are_left_alone() -> None:
    rec, step_jobs, _, _ = make()
    done = isolated_node()
    done = fleet.Node(done.name, done.boot_id, 8, 7, unschedulable=True,
                      annotations={**done.annotations, annotation_keys.VERDICT: "power-cycle"})
    human = fleet.Node("gpu-node-a", "b", 8, 8, unschedulable=True)
    assert rec.run((done, human), NOW, may_write=lambda: True) == []
    assert step_jobs.created == []


def test_an_unreadable_ledger_or_job_waits_instead_of_failing_the_tick() -> None:
    broken = FakeLedger()

    def unreadable() -> ledger_store.LedgerRead:
        raise GpuguardError("configmaps forbidden")

    broken.entries = unreadable  # type: ignore[method-assign]
    rec, step_jobs, _, _ = make(broken)
    assert rec.run((isolated_node(),), NOW, may_write=lambda: True) == []
    assert step_jobs.created == []


def test_a_malformed_annotation_on_one_node_does_not_stop_the_others() -> None:
    rec, step_jobs, _, _ = make()
    bad = isolated_node()
    bad = fleet.Node(
        "gpu-node-x", "b", 8, 7, unschedulable=True,
        annotations={**bad.annotations, annotation_keys.ISOLATED_AT: "yesterday-ish"},
    )
    finished_job = jobs.JobResult(jobs.JobState.SUCCEEDED, "{}")
    step_jobs.results = {}
    steps = rec.run((bad, isolated_node()), NOW, may_write=lambda: True)
    assert [s.node for s in steps] == ["gpu-node-b"]  # the malformed node is never written to
    assert [m["spec"]["template"]["spec"]["nodeName"] for m in step_jobs.created] == ["gpu-node-b"]
    for manifest in step_jobs.created:
        step_jobs.results[manifest["metadata"]["name"]] = finished_job
    steps = rec.run((bad, isolated_node()), NOW, may_write=lambda: True)
    assert [s.node for s in steps] == ["gpu-node-b"]


def test_no_evidence_job_for_marks_gpuguard_did_not_write() -> None:
    """A person's cordon with forged isolation marks (managedFields name another writer)."""
    import dataclasses

    rec, step_jobs, _, _ = make()
    forged = dataclasses.replace(isolated_node(), isolation_writers=frozenset({"kubectl-annotate"}))
    assert rec.run((forged,), NOW, may_write=lambda: True) == []
    assert step_jobs.created == []
    own = dataclasses.replace(isolated_node(), isolation_writers=frozenset({"gpuguard"}))
    rec.run((own,), NOW, may_write=lambda: True)
    assert len(step_jobs.created) == 1


def test_a_hung_evidence_job_ends_in_one_human_verdict_told_once() -> None:
    rec, step_jobs, book, writer = make()
    told: list[decisions.Action] = []
    rec.notifier = Told(told)
    node = isolated_node()
    rec.run((node,), NOW, may_write=lambda: True)
    ((_, mark),) = writer.annotated
    started = fleet.Node(node.name, node.boot_id, 8, 7, unschedulable=True,
                         annotations={**node.annotations, **mark})
    step_jobs.results[step_jobs.created[0]["metadata"]["name"]] = jobs.JobResult(
        jobs.JobState.FAILED, detail="DeadlineExceeded: Job was active longer than specified")
    rec.run((started,), NOW, may_write=lambda: True)
    _, verdict = writer.annotated[-1]
    decided = fleet.Node(node.name, node.boot_id, 8, 7, unschedulable=True,
                         annotations={**started.annotations, **verdict})  # type: ignore[dict-item]
    step_jobs.results.clear()  # the TTL deleted the Job
    assert rec.run((decided,), NOW, may_write=lambda: True) == []
    assert len(step_jobs.created) == 1
    assert [(e.verdict, e.xid) for e in book.lines] == [(decisions.Verdict.HUMAN_DIAGNOSIS, 79)]
    assert verdict[annotation_keys.VERDICT] == "human-diagnosis"
    assert [a.reason for a in writer.events] == [decisions.Reason.VERDICT_RECORDED]
    assert told == writer.events
    assert "evidence unavailable (DeadlineExceeded" in writer.events[0].evidence[0].value


@dataclass
class Told:
    actions: list[decisions.Action]

    def notify(self, action: decisions.Action, now: datetime) -> None:
        self.actions.append(action)


def test_the_evidence_job_is_read_against_the_uid_recorded_at_its_creation() -> None:
    """docs/security.md: a Job of gpuguard's name that gpuguard did not create is no verdict."""
    rec, step_jobs, _, writer = make()
    rec.run((isolated_node(),), NOW, may_write=lambda: True)
    (_, marks), = writer.annotated
    job = step_jobs.created[0]["metadata"]["name"]
    node = isolated_node()
    marked = fleet.Node(node.name, node.boot_id, 8, 7, unschedulable=True,
                        annotations={**node.annotations, **marks})  # fmt: skip
    rec.run((marked,), NOW, may_write=lambda: True)
    assert step_jobs.read == [(job, ""), (job, f"uid-{job}")]  # none recorded, then its own
