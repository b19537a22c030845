"""Partial-allocation deadlock (docs/fleet-health.md#gang-deadlock): a job holding GPUs while
part of it cannot be placed is a finding, for every marker system, and nothing else is."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpuguard.model import decisions, workloads
from gpuguard.policy import gang

NOW = datetime(2026, 9, 1, 12, 0, tzinfo=UTC)
LONG_AGO = NOW - timedelta(minutes=30)
INSUFFICIENT = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."


def pod(
    name: str,
    *,
    node: str | None = None,
    gpus: int = 8,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    since: datetime | None = LONG_AGO,
    **changes: object,
) -> workloads.WorkloadPod:
    base = workloads.WorkloadPod(
        namespace="ml",
        name=name,
        node=node,
        phase="Running" if node else "Pending",
        gpu_request=gpus,
        labels=labels or {},
        annotations=annotations or {},
        unschedulable_since=None if node else since,
        unschedulable_message="" if node else INSUFFICIENT,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def job(
    labels: dict[str, str], bound: int, pending: int, **extra: Any
) -> list[workloads.WorkloadPod]:
    placed = [pod(f"w{i}", node=f"gpu-node-{i}", labels=labels, **extra) for i in range(bound)]
    waiting = [pod(f"w{bound + i}", labels=labels, **extra) for i in range(pending)]
    return placed + waiting


MARKED = [
    pytest.param({"volcano.sh/job-name": "llm"}, {}, "volcano", id="volcano-label"),
    pytest.param({}, {"scheduling.k8s.io/group-name": "llm"}, "volcano", id="volcano-annotation"),
    pytest.param({"scheduling.x-k8s.io/pod-group": "llm"}, {}, "coscheduling", id="coscheduling"),
    pytest.param({"kueue.x-k8s.io/pod-group-name": "llm"}, {}, "kueue", id="kueue-plain-pods"),
    pytest.param({"training.kubeflow.org/job-name": "llm"}, {}, "training-operator", id="kubeflow"),
    pytest.param({"jobset.sigs.k8s.io/jobset-name": "llm"}, {}, "jobset", id="jobset"),
    pytest.param({"ray.io/cluster": "llm"}, {}, "kuberay", id="kuberay"),
    pytest.param({"batch.kubernetes.io/job-name": "llm"}, {}, "job", id="job"),
    pytest.param({"job-name": "llm"}, {}, "job", id="job-legacy-label"),
]


@pytest.mark.parametrize(("labels", "annotations", "system"), MARKED)
def test_every_marker_groups_a_partially_placed_job(
    labels: dict[str, str], annotations: dict[str, str], system: str
) -> None:
    pods = job(labels, bound=2, pending=2, annotations=annotations)
    [found] = gang.detect(pods, NOW)
    assert found.job == gang.JobKey("ml", system, "llm")
    assert found.gpus_held == 16
    assert found.gpu_hours == pytest.approx(16 * 0.5)
    finding = found.finding()
    assert finding.kind == "gang-partial-allocation"
    assert finding.reason is decisions.Reason.GANG_PARTIAL_ALLOCATION
    assert "ml/llm" in finding.detail
    assert "2 of 4 pods bound" in finding.detail


def test_spec_workload_reference_is_the_first_marker() -> None:
    pods = job({"batch.kubernetes.io/job-name": "inner"}, 1, 1, workload_ref="llm-gang")
    [found] = gang.detect(pods, NOW)
    assert found.job == gang.JobKey("ml", "kubernetes-workload", "llm-gang")


def test_pods_without_a_marker_are_grouped_by_their_controlling_owner() -> None:
    owner = (workloads.OwnerRef("MPIJob", "bert", controller=True),)
    [found] = gang.detect(job({}, 1, 1, owners=owner), NOW)
    assert found.job.name == "MPIJob/bert"
    assert found.owner == owner[0]


def test_ownerless_unmarked_pods_are_never_a_job() -> None:
    assert gang.detect(job({}, 1, 1), NOW) == []


LABELS = {"volcano.sh/job-name": "llm"}


@pytest.mark.parametrize(
    ("pods", "why"),
    [
        pytest.param(job(LABELS, 4, 0), "every pod placed", id="all-bound"),
        pytest.param(job(LABELS, 0, 4), "nothing held: all-or-nothing worked", id="none-bound"),
        pytest.param(job(LABELS, 2, 2, since=NOW - timedelta(minutes=5)), "within grace",
                     id="within-grace"),
        pytest.param(job(LABELS, 2, 2, gated=True), "Kueue schedulingGates", id="gated"),
        pytest.param(job(LABELS, 2, 2, gpus=0), "no GPUs", id="cpu-job"),
        pytest.param(job(LABELS, 2, 2, since=None), "pending but not unschedulable",
                     id="not-yet-tried"),
    ],
)
def test_no_finding_when(pods: list[workloads.WorkloadPod], why: str) -> None:
    assert gang.detect(pods, NOW) == [], why


def test_an_elastic_job_at_its_minimum_is_not_flagged() -> None:
    pods = job(LABELS, 2, 2)
    key = gang.JobKey("ml", "volcano", "llm")
    assert gang.detect(pods, NOW, expected={key: 2}) == []
    assert len(gang.detect(pods, NOW, expected={key: 3})) == 1


def test_kueue_total_count_annotation_is_the_expected_size() -> None:
    labels = {"kueue.x-k8s.io/pod-group-name": "llm"}
    pods = job(labels, 2, 1, annotations={gang.KUEUE_TOTAL_COUNT: "2"})
    assert gang.detect(pods, NOW) == []
    pods = job(labels, 2, 1, annotations={gang.KUEUE_TOTAL_COUNT: "4"})
    [found] = gang.detect(pods, NOW)
    assert found.expected == 4


def test_finished_pods_do_not_count() -> None:
    pods = [*job(LABELS, 0, 2), pod("done", node="gpu-node-9", labels=LABELS, phase="Succeeded")]
    assert gang.detect(pods, NOW) == []


def test_jobs_in_different_namespaces_are_different_jobs() -> None:
    other = [replace(p, namespace="research") for p in job(LABELS, 0, 2)]
    assert gang.detect([*job(LABELS, 2, 0), *other], NOW) == []


def test_gpu_hours_count_from_the_first_unschedulable_pod() -> None:
    pods = [*job(LABELS, 1, 1), pod("late", labels=LABELS, since=NOW - timedelta(minutes=12))]
    [found] = gang.detect(pods, NOW)
    assert found.pending_since == LONG_AGO
    assert found.gpu_hours == pytest.approx(8 * 0.5)
    assert len(found.pending) == 2


def test_findings_wrapper_returns_one_finding_per_job() -> None:
    pods = [*job(LABELS, 1, 1), *job({"ray.io/cluster": "rc"}, 1, 1)]
    kinds = [f.kind for f in gang.findings(pods, NOW)]
    assert kinds == ["gang-partial-allocation", "gang-partial-allocation"]


def test_a_multi_pod_job_on_the_default_scheduler_without_gang_marker_is_reported() -> None:
    [found] = gang.not_gang_scheduled(job({"batch.kubernetes.io/job-name": "llm"}, 2, 0))
    assert found.kind == "gang-scheduling-missing"
    assert "ml/llm" in found.detail


@pytest.mark.parametrize(
    "pods",
    [
        pytest.param(job(LABELS, 2, 0), id="volcano-marker"),
        pytest.param(job({"kueue.x-k8s.io/pod-group-name": "x"}, 2, 0), id="kueue-marker"),
        pytest.param(job({"job-name": "x"}, 1, 0), id="single-pod"),
        pytest.param(job({"training.kubeflow.org/job-name": "x"}, 2, 0, scheduler="volcano"),
                     id="operator-with-gang-scheduler"),
    ],
)
def test_gang_scheduled_or_single_pod_jobs_are_not(pods: list[workloads.WorkloadPod]) -> None:
    assert gang.not_gang_scheduled(pods) == []
