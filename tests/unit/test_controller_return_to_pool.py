"""The return-to-pool step applied through fakes: the lifecycle report's [docs/design.md#incidents]
9/22 return, now with the whole checklist and a burn-in; holds stay, a failed burn-in is annotated
once, dry-run writes nothing, missing facts never return a node."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuguard.actuators import ledger as ledger_store
from gpuguard.catalog import xid as xid_catalog
from gpuguard.cli.main import app
from gpuguard.controller import return_to_pool, telemetry, tick
from gpuguard.errors import SourceError
from gpuguard.model import annotation_keys as keys
from gpuguard.model import decisions, faults, fleet, jobs, settings
from gpuguard.model import metric_names as names
from gpuguard.model import return_to_pool as model
from tests import fakes
from tests.builders import burnin_summary

Step = model.ReturnStep
ISOLATED_AT = "2026-09-21T05:53:30Z"
NOW = datetime(2026, 9, 22, 16, 30, tzinfo=UTC)
CARD = "GPU-5e2b1c3d-0004"
BOOT_BEFORE, BOOT_AFTER = "6f1c0a2e-boot-before", "91d4e7b0-boot-after"
H100 = "NVIDIA H100 80GB HBM3"


# --- a burn-in summary exactly as `gpuguard burnin --summary` prints it ----------------------


# --- fakes of the step's ports ---------------------------------------------------------------


@dataclass
class FakeJobs:
    results: dict[str, jobs.JobResult] = field(default_factory=dict)
    created: list[dict[str, Any]] = field(default_factory=list)

    def create(self, manifest: dict[str, Any]) -> str | None:
        if any(m["metadata"]["name"] == manifest["metadata"]["name"] for m in self.created):
            return None
        self.created.append(manifest)
        return f"uid-{manifest['metadata']['name']}"

    def result(self, name: str, created_uid: str | None = None) -> jobs.JobResult:
        return self.results.get(name, jobs.JobResult(jobs.JobState.ABSENT))

    def finish(self, tflops: Sequence[float]) -> None:
        """Run the last created Job's command and record its pod's end."""
        manifest = self.created[-1]
        code, message = burnin_summary(_command(manifest), tflops)
        state = jobs.JobState.SUCCEEDED if code == 0 else jobs.JobState.FAILED
        self.results[manifest["metadata"]["name"]] = jobs.JobResult(state, message)


@dataclass
class FakeLedger:
    lines: list[faults.LedgerEntry] = field(default_factory=list)

    def entries(self) -> ledger_store.LedgerRead:
        return ledger_store.LedgerRead(entries=list(self.lines))

    def append(self, entry: faults.LedgerEntry) -> None:
        self.lines.append(entry)


def _command(manifest: dict[str, Any]) -> list[str]:
    command: list[str] = manifest["spec"]["template"]["spec"]["containers"][0]["command"]
    return command


def fault(at: datetime) -> faults.LedgerEntry:
    return faults.LedgerEntry(
        at=at, node="gpu-node-b", xid=79, pci="0000:99:00.0", uuid=CARD,
        recorder=faults.Recorder.GPUGUARD, verdict=decisions.Verdict.POWER_CYCLE,
    )  # fmt: skip


def isolated(
    extra: dict[str, str] | None = None, *, boot: str = BOOT_AFTER, cordoned: bool = True
) -> fleet.Node:
    """gpu-node-b as 9/22 found it: isolated for Xid 79 on 9/21, verdict recorded."""
    return fleet.Node(
        "gpu-node-b", boot, 8, 8, unschedulable=cordoned,
        annotations={
            keys.REASON: "xid-79", keys.ISOLATED_AT: ISOLATED_AT, keys.BOOT_ID: BOOT_BEFORE,
            keys.GPU_CAPACITY: "8", keys.GPU_UUID: CARD, keys.GPU_PCI: "0000:99:00.0",
            keys.VERDICT: "power-cycle", **(extra or {}),
        },
        conditions={"Ready": "True"}, resource_version="4711",
    )  # fmt: skip


def system_pods() -> list[fleet.Pod]:
    return [
        fleet.Pod("kube-system", "kube-proxy-gpu-node-b", "gpu-node-b", fleet.PodPhase.RUNNING,
                  ready=True),
        fleet.Pod("kube-system", "rke2-canal-7x2kq", "gpu-node-b", fleet.PodPhase.RUNNING,
                  ready=True),
    ]  # fmt: skip


def dcgm(**per_gpu: float) -> list[fleet.MetricSample]:
    """dcgm-exporter's series of gpu-node-b's 8 GPUs: idle, x16 gen5, no remap pending."""
    values = {
        names.DCGM_GPU_UTIL: 0.0, names.DCGM_ROW_REMAP_PENDING: 0.0,
        names.DCGM_PCIE_LINK_WIDTH: 16.0, names.DCGM_PCIE_MAX_LINK_WIDTH: 16.0,
        names.DCGM_PCIE_LINK_GEN: 5.0, names.DCGM_PCIE_MAX_LINK_GEN: 5.0,
        names.DCGM_XID_LAST: 0.0,
    }  # fmt: skip
    return [
        fleet.MetricSample(metric, {"Hostname": "gpu-node-b", "gpu": str(gpu), "UUID": f"u{gpu}"},
                           per_gpu.get(f"{_key(metric)}_{gpu}", value), NOW)
        for gpu in range(8)
        for metric, value in values.items()
    ]  # fmt: skip


def _key(metric: str) -> str:
    return {
        names.DCGM_XID_LAST: "xid",
        names.DCGM_ROW_REMAP_PENDING: "remap",
        names.DCGM_PCIE_LINK_WIDTH: "width",
    }.get(metric, metric)


@dataclass
class World:
    step: return_to_pool.ReturnToPool
    jobs: FakeJobs
    writer: fakes.FakeWriter
    facts: fakes.FakeMetrics
    ledger: FakeLedger
    notices: list[decisions.Action]
    pods: list[fleet.Pod]

    def tick(self, node: fleet.Node, *, may_write: bool = True) -> return_to_pool.ReturnOutcome:
        snapshot = fleet.FleetSnapshot(NOW, nodes=(node,), pods=tuple(self.pods))
        (outcome,) = self.step.run(snapshot, NOW, may_write=lambda: may_write)
        return outcome


@dataclass
class Notices:
    sent: list[decisions.Action]

    def notify(self, action: decisions.Action, now: datetime) -> None:
        self.sent.append(action)


def world(samples: list[fleet.MetricSample] | None = None, ledger_faults: int = 1) -> World:
    facts = fakes.FakeMetrics(series=dcgm() if samples is None else samples)
    last = datetime(2026, 9, 21, 5, 53, tzinfo=UTC)  # the card's faults, 11 days apart
    book = FakeLedger([fault(last - timedelta(days=11 * n)) for n in range(ledger_faults)])
    notices: list[decisions.Action] = []
    step_jobs, writer = FakeJobs(), fakes.FakeWriter()
    step = return_to_pool.ReturnToPool(
        jobs=step_jobs, ledger=book, writer=writer, facts=facts,
        classifier=xid_catalog.load_catalog(), settings=settings.GuardSettings(),
        image="gpuguard:test", notifier=Notices(notices),
    )  # fmt: skip
    return World(step, step_jobs, writer, facts, book, notices, system_pods())


def returned(node: fleet.Node, remove: tuple[str, ...]) -> fleet.Node:
    """The node as the API server shows it after the uncordon patch."""
    marks = {k: v for k, v in node.annotations.items() if k not in remove}
    return replace(node, unschedulable=False, annotations=marks)


def test_sept_22_return_runs_the_checklist_then_a_burnin_then_one_uncordon_patch() -> None:
    w = world()
    node = isolated()
    first = w.tick(node)
    assert first.decision.step is Step.START_BURN_IN
    assert all(c.status is decisions.CheckStatus.PASS for c in first.decision.checks)
    (job,) = w.jobs.created
    assert _command(job)[:2] == ["gpuguard", "burnin"]
    assert job["spec"]["template"]["spec"]["nodeName"] == "gpu-node-b"
    assert job["metadata"]["annotations"][keys.BOOT_ID] == BOOT_AFTER
    assert job["metadata"]["labels"][keys.BURNIN_NODE_LABEL] == "gpu-node-b"
    job_name = job["metadata"]["name"]
    assert (w.writer.uncordoned, w.writer.annotated) == (
        [], [("gpu-node-b", {keys.BURNIN_JOB_UID: f"{job_name}=uid-{job_name}"})]
    )  # the uid it created, read back against (docs/security.md)
    assert [e.kind for e in w.writer.events] == [decisions.ActionKind.START_BURNIN_JOB]

    w.jobs.results[job["metadata"]["name"]] = jobs.JobResult(jobs.JobState.RUNNING)
    assert w.tick(node).decision.step is Step.BURN_IN_RUNNING
    assert len(w.jobs.created) == 1

    w.jobs.finish([740.0] * 8)
    done = w.tick(node)
    assert (done.decision.step, done.done, done.returned) == (Step.UNCORDON, "applied", True)
    ((name, removed),) = w.writer.uncordoned
    assert name == "gpu-node-b"
    assert {keys.ISOLATED_AT, keys.REASON, keys.BOOT_ID, keys.VERDICT} <= set(removed)
    assert [e.reason for e in w.writer.events][1:] == [decisions.Reason.BURN_IN_PASSED]
    assert [n.kind for n in w.notices] == [decisions.ActionKind.UNCORDON]
    assert "returned to service" in w.notices[0].detail
    assert w.step.run(fleet.FleetSnapshot(NOW, nodes=(returned(node, removed),)), NOW,
                      may_write=lambda: True) == []  # fmt: skip


def test_burnin_of_a_memory_class_fault_runs_the_memory_test() -> None:
    w = world()
    node = isolated({keys.REASON: "xid-48", keys.VERDICT: "gpu-reset",
                     keys.RESET_DONE: "2026-09-22T09:00:00Z"})  # fmt: skip
    node = replace(node, boot_id=BOOT_BEFORE)
    assert w.tick(node).decision.step is Step.START_BURN_IN
    (job,) = w.jobs.created
    assert _command(job)[_command(job).index("--mode") + 1] == "memory"
    w.jobs.finish([740.0] * 8)
    assert w.tick(node).decision.step is Step.UNCORDON


@pytest.mark.parametrize(
    ("node", "samples", "ledger_faults", "blocking"),
    [
        pytest.param(
            isolated({keys.HOLD: "infra-team: inspect card 4 (9/22)"}),
            None,
            1,
            model.ReturnCondition.NO_HOLD,
            id="9-22-infra-team-hold-annotation",
        ),
        pytest.param(
            isolated(),
            None,
            2,
            model.ReturnCondition.CARD_HISTORY,
            id="9-22-second-xid79-of-the-card-in-11-days",
        ),
        pytest.param(
            isolated(),
            dcgm(remap_4=1.0),
            1,
            model.ReturnCondition.ROW_REMAP_PENDING,
            id="row-remap-pending-needs-a-reset",
        ),
        pytest.param(
            isolated(),
            dcgm(xid_4=79.0),
            1,
            model.ReturnCondition.NO_HARDWARE_XID,
            id="xid79-again-after-the-power-cycle",
        ),
        pytest.param(
            isolated(),
            dcgm(width_4=8.0),
            1,
            model.ReturnCondition.PCIE_LINK,
            id="pcie-link-x8-of-x16",
        ),
        pytest.param(
            isolated(boot=BOOT_BEFORE),
            None,
            1,
            model.ReturnCondition.REBOOTED_OR_RESET,
            id="xid79-not-power-cycled-yet",
        ),
    ],
)
def test_a_failed_condition_holds_the_node_with_no_job_and_no_write(
    node: fleet.Node,
    samples: list[fleet.MetricSample] | None,
    ledger_faults: int,
    blocking: model.ReturnCondition,
) -> None:
    w = world(samples, ledger_faults)
    outcome = w.tick(node)
    assert outcome.decision.step is Step.HOLD
    assert outcome.decision.blocking is not None
    assert outcome.decision.blocking.name is blocking
    assert (w.jobs.created, w.writer.uncordoned, w.writer.annotated, w.writer.events) == (
        [], [], [], [])  # fmt: skip


@pytest.mark.parametrize(
    ("samples", "error", "blocking"),
    [
        pytest.param(None, SourceError("Prometheus down"), model.ReturnCondition.NO_HARDWARE_XID,
                     id="prometheus-unreadable"),
        pytest.param([], None, model.ReturnCondition.NO_HARDWARE_XID,
                     id="dcgm-exporter-not-reporting-the-node"),
    ],
)  # fmt: skip
def test_missing_facts_never_return_a_node(
    samples: list[fleet.MetricSample] | None,
    error: Exception | None,
    blocking: model.ReturnCondition,
) -> None:
    w = world(samples)
    w.facts.error = error
    outcome = w.tick(isolated())
    assert outcome.decision.step is Step.WAIT
    assert outcome.decision.blocking is not None
    assert outcome.decision.blocking.name is blocking
    assert (w.jobs.created, w.writer.uncordoned) == ([], [])


def test_a_failed_burnin_keeps_the_node_and_is_annotated_and_told_once() -> None:
    w = world()
    node = isolated()
    w.tick(node)
    w.jobs.finish([740.0] * 7 + [520.0])  # GPU 7 at 70 % of the others
    failed = w.tick(node)
    assert failed.decision.step is Step.STAY_ISOLATED
    (_, (name, marks)) = w.writer.annotated  # the burn-in's uid, then the failure
    assert name == "gpu-node-b"
    reason = marks[keys.RETURN_FAILED]
    assert reason is not None
    assert reason.startswith("throughput-balance FAIL")
    assert [n.reason for n in w.notices] == [decisions.Reason.BURN_IN_FAILED]
    assert [(e.node, e.kind) for e in w.ledger.lines[-1:]] == [
        ("gpu-node-b", faults.FaultKind.BURNIN_FAILED)]
    lines = len(w.ledger.lines)
    marked = isolated({k: v for k, v in marks.items() if v is not None})
    again = w.tick(marked)
    w.jobs.results.clear()  # the TTL deleted the Job: the mark keeps the failure
    gone = w.tick(marked)
    assert (again.decision.step, again.done) == (Step.STAY_ISOLATED, "-")
    assert (gone.decision.step, gone.done) == (Step.STAY_ISOLATED, "-")
    assert len(w.jobs.created) == 1
    assert len(w.writer.annotated) == 2
    assert len(w.notices) == 1
    assert len(w.ledger.lines) == lines
    assert w.writer.uncordoned == []


def test_another_power_cycle_after_a_failed_burnin_gets_a_new_job() -> None:
    w = world()
    w.tick(isolated())
    w.jobs.finish([740.0] * 7 + [520.0])
    w.tick(isolated())
    w.tick(isolated(boot="c0ffee00-third-boot"))
    first, second = (m["metadata"]["name"] for m in w.jobs.created)
    assert first != second
    assert w.jobs.created[1]["metadata"]["annotations"][keys.BOOT_ID] == "c0ffee00-third-boot"


def test_dry_run_or_a_standby_decides_but_writes_nothing() -> None:
    w = world()
    node = isolated()
    assert w.tick(node, may_write=False).done == "dry-run"
    assert w.jobs.created == []
    assert w.writer.events == []
    w.tick(node)
    w.jobs.finish([740.0] * 8)
    started, marked = list(w.writer.events), list(w.writer.annotated)
    outcome = w.tick(node, may_write=False)
    assert (outcome.decision.step, outcome.done, outcome.returned) == (
        Step.UNCORDON, "dry-run", False)  # fmt: skip
    assert (w.writer.uncordoned, w.writer.annotated, w.writer.events, w.notices) == (
        [], marked, started, [])  # fmt: skip


def test_a_human_uncordon_first_cleans_gpuguards_annotations_and_says_burnin_skipped() -> None:
    w = world()
    outcome = w.tick(isolated(cordoned=False))
    assert outcome.decision.step is Step.CLEAN_ANNOTATIONS
    ((name, marks),) = w.writer.annotated
    assert name == "gpu-node-b"
    assert keys.ISOLATED_AT in marks
    assert set(marks.values()) == {None}
    assert "burn-in skipped" in w.writer.events[0].detail
    assert w.jobs.created == []


def test_a_node_still_waiting_for_its_verdict_is_shown_but_left_to_the_evidence_step() -> None:
    w = world()
    node = isolated()
    pending = replace(
        node, annotations={k: v for k, v in node.annotations.items() if k != keys.VERDICT}
    )
    outcome = w.tick(pending)
    awaiting = return_to_pool.AWAITING_VERDICT
    assert (outcome.decision.step, outcome.done) == (Step.START_BURN_IN, awaiting)
    assert len(outcome.decision.checks) == len(model.ReturnCondition)
    assert (w.jobs.created, w.writer.events) == ([], [])


@pytest.mark.parametrize(
    ("state", "message", "outcome", "failed"),
    [
        pytest.param(jobs.JobState.ABSENT, None, None, "", id="no-job-yet"),
        pytest.param(jobs.JobState.RUNNING, None, model.BurninOutcome.RUNNING, "", id="running"),
        pytest.param(jobs.JobState.FAILED, None, model.BurninOutcome.FAILED,
                     "burn-in Job failed: DeadlineExceeded", id="deadline-no-summary"),
        pytest.param(jobs.JobState.SUCCEEDED, "not json", model.BurninOutcome.FAILED,
                     "burn-in Job succeeded: no summary", id="unreadable-summary-never-passes"),
        pytest.param(jobs.JobState.SUCCEEDED, json.dumps({"passed": False, "mode": "matmul",
                     "checks": [{"check": "gpu-count", "status": "FAIL", "evidence": "7/8"}]}),
                     model.BurninOutcome.FAILED, "gpu-count FAIL: 7/8", id="exit-0-but-not-passed"),
    ],
)  # fmt: skip
def test_burnin_result_from_the_job(
    state: jobs.JobState,
    message: str | None,
    outcome: model.BurninOutcome | None,
    failed: str,
) -> None:
    detail = "DeadlineExceeded" if state is jobs.JobState.FAILED else ""
    result = return_to_pool.burnin_result(
        jobs.JobResult(state, message, detail), model.BurninMode.MATMUL, BOOT_AFTER, NOW
    )
    assert (result.outcome if result else None) is outcome
    if result is not None:
        assert result.boot_id == BOOT_AFTER
        assert result.failed_check == failed


def test_guard_tick_exports_the_checklist_and_counts_the_return() -> None:
    w = world()
    node = isolated()
    exporter = fleet.MetricSample(
        names.DCGM_NODE_NEWEST, {"Hostname": node.name}, NOW.timestamp(), NOW
    )  # its dcgm-exporter answers (policy.freshness)
    guard = tick.Guard(
        metrics=fakes.FakeMetrics([exporter]), cluster=fakes.FakeCluster([node], w.pods),
        writer=w.writer, classifier=xid_catalog.load_catalog(),
        settings=settings.GuardSettings(), clock=fakes.FakeClock(NOW), return_to_pool=w.step,
    )  # fmt: skip
    metrics = telemetry.GuardMetrics()
    metrics.observe(guard.tick())
    w.jobs.finish([740.0] * 8)
    metrics.observe(guard.tick())
    text = metrics.exposition().decode()
    assert 'gpuguard_nodes_returned_total{node="gpu-node-b"} 1.0' in text
    assert (
        'gpuguard_return_check_status{check="card-history",node="gpu-node-b",status="PASS"} 1.0'
        in text
    )


def test_the_card_history_is_unknown_while_the_ledger_cannot_be_read() -> None:
    w = world()
    w.step.ledger = BrokenLedger()
    outcome = w.tick(isolated())
    assert outcome.decision.step is Step.WAIT
    assert outcome.decision.blocking is not None
    assert outcome.decision.blocking.name is model.ReturnCondition.CARD_HISTORY


class BrokenLedger:
    def entries(self) -> ledger_store.LedgerRead:
        raise SourceError("configmaps: 503")


def test_the_real_burnin_command_output_is_read_and_cpu_mode_never_passes() -> None:
    argv = ["burnin", "--device", "cpu", "--size", "8", "--duration", "0.05s", "--summary",
            "--expected-gpus", "1", "--mode", "matmul"]  # fmt: skip
    ran = CliRunner().invoke(app, argv)
    state = jobs.JobState.SUCCEEDED if ran.exit_code == 0 else jobs.JobState.FAILED
    result = return_to_pool.burnin_result(
        jobs.JobResult(state, ran.stdout), model.BurninMode.MATMUL, BOOT_AFTER, NOW
    )
    assert result is not None
    assert (result.outcome, result.mode) == (model.BurninOutcome.FAILED, model.BurninMode.MATMUL)
    assert result.failed_check.startswith("throughput-floor UNKNOWN: no expected fp16")


def test_a_silent_exporter_makes_the_gpu_facts_unknown_whatever_was_last_seen() -> None:
    w = world()
    node = isolated()
    snapshot = fleet.FleetSnapshot(taken_at=NOW, nodes=(node,), pods=tuple(w.pods))
    (heard,) = w.step.run(snapshot, NOW, may_write=lambda: True)
    (unheard,) = w.step.run(snapshot, NOW, may_write=lambda: True, silent=frozenset({node.name}))
    assert heard.decision.step is not Step.WAIT
    assert unheard.decision.step is Step.WAIT
    assert unheard.decision.blocking is not None
    assert unheard.decision.blocking.name is model.ReturnCondition.NO_HARDWARE_XID


def test_facts_are_asked_only_of_the_isolated_nodes_and_not_at_all_without_them() -> None:
    w = world()
    healthy = replace(isolated(), name="gpu-node-a", annotations={}, unschedulable=False)
    snapshot = fleet.FleetSnapshot(NOW, nodes=(healthy, isolated()), pods=tuple(w.pods))
    (outcome,) = w.step.run(snapshot, NOW, may_write=lambda: False)
    assert w.facts.asked_nodes == [("gpu-node-b",)]
    assert outcome.decision.step is Step.START_BURN_IN  # the facts of gpu-node-b were all read
    w.step.run(fleet.FleetSnapshot(NOW, nodes=(healthy,)), NOW, may_write=lambda: False)
    assert w.facts.asked_nodes == [("gpu-node-b",)]


def test_a_burnin_is_read_against_the_uid_gpuguard_recorded_for_that_job() -> None:
    """A Job of this name that gpuguard did not create (none recorded, or recorded for
    another Job) is checked against "": not gpuguard's, a failure (actuators.jobs)."""
    node = isolated({keys.BURNIN_JOB_UID: "gpuguard-burnin-gpu-node-b-d3af99b4=u-1"})
    assert return_to_pool.burnin_created_uid(node, "gpuguard-burnin-gpu-node-b-d3af99b4") == "u-1"
    assert return_to_pool.burnin_created_uid(node, "gpuguard-burnin-gpu-node-b-0000") == ""
    unmarked = isolated()
    assert return_to_pool.burnin_created_uid(unmarked, "gpuguard-burnin-gpu-node-b-d3af99b4") == ""
