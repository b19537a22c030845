"""gpuguard's Jobs run on their pinned node in the simulator's Job controller, and the guard's
Job adapter reads their state (the Job's conditions) and termination message over HTTP: the
deadline, backoff, TTL and PodGC paths, and pods that only pretend to belong to a Job."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import timedelta

import lightkube
import pytest

from gpuguard.actuators import jobs
from gpuguard.model import jobs as job_model
from gpuguard.model import settings
from gpuguard.sim import clock, kubeapi, kubelet, scenario, state, store, world

pytestmark = pytest.mark.integration

DEADLINE = settings.DEFAULT_EVIDENCE_DEADLINE


def two_nodes() -> world.World:
    spec = scenario.from_mapping(
        {
            "name": "jobs",
            "fleet": {"nodes": ["gpu-node-a", "gpu-node-b"], "gpus_per_node": 8,
                      "model": "NVIDIA H100 80GB HBM3", "driver": "580.126.09"},
            "events": [{"at": "1m", "reboot": {"node": "gpu-node-b"}}],
        },
        source="test",
    )
    return world.World.from_scenario(spec, store.ObjectStore(), clock.SimClock(spec.start))


def test_a_pinned_job_runs_on_its_node_and_reports_its_message() -> None:
    played = two_nodes()
    ran: list[tuple[str, list[str]]] = []

    def run(node: state.SimNode, argv: list[str]) -> tuple[int, str]:
        ran.append((node.name, argv))
        return 0, '{"verdict": "power-cycle"}'

    runner = kubelet.JobKubelet(played, run, runtime=timedelta(seconds=30))
    manifest = jobs.evidence_job("gpu-node-a", "2026-09-21T06:05:10Z", image="gpuguard:test",
                                deadline=DEADLINE)
    name = manifest["metadata"]["name"]
    with kubeapi.serve(played.store) as api, lightkube.Client(
        config=kubeapi.lightkube_config(api.url)
    ) as client:
        adapter = jobs.Jobs(client)
        uid = adapter.create(manifest)
        assert uid == played.store.get("Job", "gpuguard", name)["metadata"]["uid"]
        assert adapter.create(manifest) is None  # the next tick finds it again
        assert adapter.result(name, created_uid=uid).state is job_model.JobState.RUNNING
        runner.step()
        assert adapter.result(name).state is job_model.JobState.RUNNING
        played.step_to(timedelta(seconds=45))
        runner.step()
        result = adapter.result(name)
    assert result.state is job_model.JobState.SUCCEEDED
    assert result.message == '{"verdict": "power-cycle"}'
    assert result.started_at == played.origin  # the Job started on the controller's first pass
    assert ran == [("gpu-node-a", manifest["spec"]["template"]["spec"]["containers"][0]["command"])]


def test_a_job_waits_while_its_node_is_down_and_fails_on_a_missing_node() -> None:
    played = two_nodes()
    runner = kubelet.JobKubelet(played, lambda node, argv: (0, "ok"))
    played.step_to(timedelta(minutes=1, seconds=10))  # gpu-node-b is rebooting
    down = jobs.evidence_job("gpu-node-b", "t", image="gpuguard:test",
                                deadline=DEADLINE)
    ghost = jobs.evidence_job("gpu-node-z", "t", image="gpuguard:test",
                                deadline=DEADLINE)
    for manifest in (down, ghost):
        played.store.create("Job", "gpuguard", manifest)
    runner.step()
    pods = {p["metadata"]["labels"]["job-name"]: p for p in played.store.list("Pod", "gpuguard")}
    assert pods[down["metadata"]["name"]]["status"]["phase"] == "Pending"
    assert pods[ghost["metadata"]["name"]]["status"]["phase"] == "Failed"
    assert "not found" in pods[ghost["metadata"]["name"]]["status"]["containerStatuses"][0][
        "state"]["terminated"]["message"]
    runner.step()  # the Job controller counts the failed pod: backoffLimit 0
    ghost_job = played.store.get("Job", "gpuguard", ghost["metadata"]["name"])
    assert [c["reason"] for c in ghost_job["status"]["conditions"]] == ["BackoffLimitExceeded"]


def guarded(played: world.World) -> Iterator[jobs.Jobs]:
    with kubeapi.serve(played.store) as api, lightkube.Client(
        config=kubeapi.lightkube_config(api.url)
    ) as client:
        yield jobs.Jobs(client)


adapter = contextlib.contextmanager(guarded)


def hang(played: world.World, node: str, kind: str) -> None:
    played.memory.job_hangs.add((node, kind))


def test_a_hung_job_is_decided_failed_at_its_deadline_while_its_pod_stays_terminating() -> None:
    """Kubernetes 1.31+: at the deadline the Job gets FailureTarget at once and Failed only
    when its pods have terminated; a pod stuck in a dead GPU's driver never does."""
    played = two_nodes()
    runner = kubelet.JobKubelet(played, lambda node, argv: (0, "never"))
    hang(played, "gpu-node-a", "evidence")
    manifest = jobs.evidence_job("gpu-node-a", "2026-09-21T06:05:10Z", image="gpuguard:test",
                                deadline=DEADLINE)
    name, deadline = manifest["metadata"]["name"], manifest["spec"]["activeDeadlineSeconds"]
    with adapter(played) as guard_jobs:
        guard_jobs.create(manifest)
        runner.step()
        played.step_to(timedelta(seconds=deadline - 15))
        runner.step()
        assert guard_jobs.result(name).state is job_model.JobState.RUNNING
        played.step_to(timedelta(seconds=deadline))
        runner.step()
        result = guard_jobs.result(name)
    assert result.state is job_model.JobState.FAILED
    assert result.detail.startswith("DeadlineExceeded: Job was active longer than specified")
    job = played.store.get("Job", "gpuguard", name)
    assert [c["type"] for c in job["status"]["conditions"]] == ["FailureTarget"]
    (pod,) = played.store.list("Pod", "gpuguard")
    assert pod["metadata"]["deletionTimestamp"]


def test_a_slow_job_fails_at_its_deadline_once_its_pod_is_gone() -> None:
    played = two_nodes()
    manifest = jobs.evidence_job("gpu-node-a", "2026-09-21T06:05:10Z", image="gpuguard:test",
                                deadline=DEADLINE)
    name, deadline = manifest["metadata"]["name"], manifest["spec"]["activeDeadlineSeconds"]
    runner = kubelet.JobKubelet(played, lambda node, argv: (0, "late"),
                                runtime=timedelta(seconds=deadline * 2))
    with adapter(played) as guard_jobs:
        guard_jobs.create(manifest)
        runner.step()
        played.step_to(timedelta(seconds=deadline))
        runner.step()
        result = guard_jobs.result(name)
    assert result.state is job_model.JobState.FAILED
    assert "pods are gone" in result.detail
    job = played.store.get("Job", "gpuguard", name)
    assert [c["type"] for c in job["status"]["conditions"]] == ["FailureTarget", "Failed"]
    assert played.store.list("Pod", "gpuguard") == []


def test_the_job_result_outlives_podgc_and_the_ttl_deletes_the_job() -> None:
    played = two_nodes()
    runner = kubelet.JobKubelet(played, lambda node, argv: (0, '{"ok": 1}'), pod_gc_threshold=0)
    manifest = jobs.evidence_job("gpu-node-a", "2026-09-21T06:05:10Z", image="gpuguard:test",
                                deadline=DEADLINE)
    name, ttl = manifest["metadata"]["name"], manifest["spec"]["ttlSecondsAfterFinished"]
    with adapter(played) as guard_jobs:
        guard_jobs.create(manifest)
        runner.step()
        played.step_to(timedelta(seconds=30))
        runner.step()  # the pod ends; PodGC (threshold 0) deletes it at once
        assert played.store.list("Pod", "gpuguard") == []
        gone_pods = guard_jobs.result(name)
        played.step_to(timedelta(seconds=30 + ttl))
        runner.step()
        gone_job = guard_jobs.result(name)
    assert (gone_pods.state, gone_pods.message) == (job_model.JobState.SUCCEEDED, None)
    assert gone_job.state is job_model.JobState.ABSENT


def test_a_failed_pod_is_retried_up_to_the_backoff_limit() -> None:
    played = two_nodes()
    runs: list[str] = []

    def fail(node: state.SimNode, argv: list[str]) -> tuple[int, str]:
        runs.append(node.name)
        return 1, "collector crashed"

    runner = kubelet.JobKubelet(played, fail)
    manifest = jobs.evidence_job("gpu-node-a", "t", image="gpuguard:test",
                                deadline=DEADLINE)
    manifest["spec"]["backoffLimit"] = 1
    with adapter(played) as guard_jobs:
        guard_jobs.create(manifest)
        for offset in (0, 30, 60, 90):
            played.step_to(timedelta(seconds=offset))
            runner.step()
        result = guard_jobs.result(manifest["metadata"]["name"])
    assert runs == ["gpu-node-a", "gpu-node-a"]
    assert result.state is job_model.JobState.FAILED
    assert result.detail == "BackoffLimitExceeded: Job has reached the specified backoff limit"
    assert result.message == "collector crashed"


def test_a_pod_that_only_carries_the_job_name_label_is_not_read() -> None:
    played = two_nodes()
    runner = kubelet.JobKubelet(played, lambda node, argv: (0, '{"verdict": "rma"}'))
    manifest = jobs.evidence_job("gpu-node-a", "t", image="gpuguard:test",
                                deadline=DEADLINE)
    name = manifest["metadata"]["name"]
    forged = {
        "metadata": {"name": "forged", "labels": {"job-name": name},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                          "uid": "not-the-job", "controller": True}]},
        "spec": {"containers": []},
        "status": {"phase": "Succeeded", "containerStatuses": [{"name": "x", "ready": False,
            "restartCount": 0, "image": "x", "imageID": "",
            "state": {"terminated": {"exitCode": 0, "message": '{"verdict": "power-cycle"}'}}}]},
    }  # fmt: skip
    with adapter(played) as guard_jobs:
        guard_jobs.create(manifest)
        played.store.create("Pod", "gpuguard", forged)
        runner.step()
        played.step_to(timedelta(seconds=30))
        runner.step()
        result = guard_jobs.result(name)
    assert (result.state, result.message) == (job_model.JobState.SUCCEEDED, '{"verdict": "rma"}')


@pytest.mark.parametrize("pinned_by", ["label-and-node", "node-only"])
def test_a_job_of_gpuguards_name_pinned_elsewhere_reads_as_not_ours_never_passed(
    pinned_by: str,
) -> None:
    """A burn-in of gpuguard's predictable name for gpu-node-a, created in advance on the
    healthy gpu-node-b (where it passes), is not gpuguard's: a failure naming gpu-node-b."""
    played = two_nodes()
    runner = kubelet.JobKubelet(played, lambda node, argv: (0, '{"passed": true}'))
    manifest = jobs.burnin_job("gpu-node-a", "t", "boot", gpus=8, mode="matmul",
                               image="gpuguard:test", deadline=settings.DEFAULT_BURNIN_DEADLINE)
    name = manifest["metadata"]["name"]
    manifest["spec"]["template"]["spec"]["nodeName"] = "gpu-node-b"
    if pinned_by == "label-and-node":
        for meta in (manifest["metadata"], manifest["spec"]["template"]["metadata"]):
            meta["labels"][jobs.NODE_LABEL] = "gpu-node-b"
    with adapter(played) as guard_jobs:
        played.store.create("Job", "gpuguard", manifest)
        runner.step()
        played.step_to(timedelta(seconds=30))
        runner.step()
        assert guard_jobs.create(manifest) is None  # gpuguard finds "its" Job there
        result = guard_jobs.result(name)
    assert result.state is job_model.JobState.FAILED
    assert result.detail.startswith(f"not gpuguard's Job: {name} is pinned to gpu-node-b")


@pytest.mark.parametrize("recorded", ["", "uid-of-the-job-gpuguard-created"])
def test_a_job_of_exactly_gpuguards_shape_made_first_reads_as_not_created_never_a_verdict(
    recorded: str,
) -> None:
    """The admission policies uninstalled, someone creates the evidence Job of gpuguard's
    name and exact shape on the right node first: gpuguard's create finds it there (recorded
    on the node: none), or another uid is recorded. Its result is a failure naming its uid."""
    played = two_nodes()
    runner = kubelet.JobKubelet(played, lambda node, argv: (0, '{"verdict": "power-cycle"}'))
    manifest = jobs.evidence_job("gpu-node-a", "2026-09-21T06:05:10Z", image="gpuguard:test",
                                deadline=DEADLINE)
    name = manifest["metadata"]["name"]
    with adapter(played) as guard_jobs:
        planted = played.store.create("Job", "gpuguard", manifest)
        runner.step()
        played.step_to(timedelta(seconds=45))
        runner.step()
        assert guard_jobs.create(manifest) is None
        assert guard_jobs.result(name).state is job_model.JobState.SUCCEEDED  # unchecked
        result = guard_jobs.result(name, created_uid=recorded)
    assert result.state is job_model.JobState.FAILED
    assert result.message is None
    assert result.detail.startswith(
        f"not gpuguard's Job: {name} has uid {planted['metadata']['uid']}, gpuguard created"
    )
