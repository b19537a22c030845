"""The GPU-isolation step against fakes: the Job it starts, the marks it writes from the Job's
report, and the node isolation when the GPU cannot be kept out."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import lightkube
import pytest

from gpuguard.actuators import eviction
from gpuguard.actuators import jobs as job_specs
from gpuguard.actuators import ledger as ledger_store
from gpuguard.catalog import xid as xid_catalog
from gpuguard.controller import gpu_isolation as step
from gpuguard.controller import wiring
from gpuguard.model import annotation_keys, decisions, fleet, gpu_isolation, metric_names
from gpuguard.model import jobs as job_model
from gpuguard.model import settings as settings_model
from gpuguard.policy import gpu_enforcement as policy
from gpuguard.sim import kubeapi
from tests.fakes import FakeWriter

NOW = datetime(2026, 8, 10, 16, 0, tzinfo=UTC)
CATALOG = xid_catalog.load_catalog()
CARD = "GPU-0a8e0faa"


@dataclass
class FakeJobs:
    created: list[dict[str, Any]] = field(default_factory=list)
    results: dict[str, job_model.JobResult] = field(default_factory=dict)

    def create(self, manifest: dict[str, Any]) -> str | None:
        self.created.append(manifest)
        return f"uid-{manifest['metadata']['name']}"

    def result(self, name: str) -> job_model.JobResult:
        return self.results.get(name, job_model.JobResult(job_model.JobState.ABSENT))


class EmptyLedger:
    def entries(self) -> ledger_store.LedgerRead:
        return ledger_store.LedgerRead([], [])

    def append(self, entry: Any) -> None:
        raise AssertionError("the GPU step writes no ledger line")


@dataclass
class FakeMarker:
    marks: list[tuple[str, dict[str, str | None], dict[str, str | None]]] = field(
        default_factory=list
    )

    def mark(
        self, node: fleet.Node, annotations: dict[str, str | None], labels: dict[str, str | None]
    ) -> None:
        self.marks.append((node.name, annotations, labels))


def snapshot() -> fleet.FleetSnapshot:
    isolated = gpu_isolation.IsolatedGpu(CARD, "0000:2a:00.0", "1", NOW, "xid-48", capacity=4)
    node = fleet.Node("gpu-node-a", "boot-1", 4, 3, conditions={"Ready": "True"},
                      annotations={annotation_keys.GPU_ISOLATED:
                                   gpu_isolation.to_annotation((isolated,)) or ""})
    return fleet.FleetSnapshot(NOW, nodes=(node,))


def run(
    jobs: FakeJobs, writer: FakeWriter, marker: FakeMarker, *, xid_overrides: bool = False
) -> list[step.Outcome]:
    guard = step.GpuIsolation(jobs, EmptyLedger(), writer, marker, CATALOG, image="gpuguard:test",
                              xid_overrides=xid_overrides)
    return guard.run(snapshot(), may_write=lambda: True)


def test_a_new_gpu_isolation_starts_the_pinned_job() -> None:
    jobs = FakeJobs()
    run(jobs, FakeWriter(), FakeMarker())
    (job,) = jobs.created
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeName"] == "gpu-node-a"
    assert pod["containers"][0]["command"][:6] == [
        "gpuguard", "gpu-isolate", "apply", "--root", "/host", "--uuid"
    ]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": CARD} in pod["containers"][0]["env"]


def test_the_job_reads_the_controllers_xid_override_file_when_it_has_one() -> None:
    plain, read = FakeJobs(), FakeJobs()
    run(plain, FakeWriter(), FakeMarker())
    run(read, FakeWriter(), FakeMarker(), xid_overrides=True)
    (without,), (with_file,) = plain.created, read.created
    assert "xid-overrides" not in json.dumps(without)  # nothing changes without the file
    pod = with_file["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"][-4:] == ["--xid-overrides", "/etc/gpuguard-xid/xid-overrides.yaml",
                                         "--summary-file", "/dev/termination-log"]
    assert pod["volumes"][-1] == {"name": "xid-overrides", "configMap": {
        "name": "gpuguard-xid-overrides",
        "items": [{"key": "xid-overrides.yaml", "path": "xid-overrides.yaml"}]}}
    assert container["volumeMounts"][-1] == {
        "name": "xid-overrides", "mountPath": "/etc/gpuguard-xid", "readOnly": True}
    # the rest of the Job is the same Job (same name: the same isolation)
    pod["volumes"].pop()
    container["volumeMounts"].pop()
    del container["command"][-4:-2]
    assert with_file == without


@pytest.mark.parametrize("overrides", [None, Path("/etc/gpuguard-xid/xid-overrides.yaml")])
def test_the_controller_gives_the_job_its_file_only_when_it_has_one(
    overrides: Path | None,
) -> None:
    guard_settings = settings_model.GuardSettings.model_validate(
        {"controller": {"xid_overrides": overrides}})
    client = lightkube.Client(config=kubeapi.lightkube_config("http://127.0.0.1:9"))
    made = wiring.gpu_isolation_step(client, FakeWriter(), CATALOG,  # type: ignore[arg-type]
                                     guard_settings, namespace="gpuguard",
                                     fault_ledger=EmptyLedger())
    assert made.xid_overrides is (overrides is not None)
    assert job_specs.XID_OVERRIDES_FILE == "/etc/gpuguard-xid/xid-overrides.yaml"


def finished(jobs: FakeJobs, mode: str) -> None:
    run(jobs, FakeWriter(), FakeMarker())
    name = jobs.created[0]["metadata"]["name"]
    gpu = {"uuid": CARD, "compute_mode": mode, "excluded": True, "kernel_fault": True}
    jobs.results[name] = job_model.JobResult(
        job_model.JobState.SUCCEEDED, json.dumps({"gpus": [gpu]})
    )


def test_a_held_report_writes_the_marks_and_the_label_in_one_write() -> None:
    jobs, writer, marker = FakeJobs(), FakeWriter(), FakeMarker()
    finished(jobs, "PROHIBITED")
    (outcome,) = run(jobs, writer, marker)
    ((node_name, annotations, labels),) = marker.marks
    assert node_name == "gpu-node-a"
    assert labels == {gpu_isolation.DEVICE_PLUGIN_LABEL: "excluding",
                      gpu_isolation.DEVICE_PLUGIN_VISIBLE_LABEL: "0-2-3"}
    assert '"applied_boot":"boot-1"' in (annotations[annotation_keys.GPU_ISOLATED] or "")
    assert outcome.action is not None
    assert outcome.action.reason is decisions.Reason.GPU_ISOLATION_APPLIED
    assert writer.events == [outcome.action]
    assert writer.isolated == []


def test_a_gpu_that_cannot_be_kept_out_isolates_its_node() -> None:
    jobs, writer, marker = FakeJobs(), FakeWriter(), FakeMarker()
    finished(jobs, "DEFAULT")
    run(jobs, writer, marker)
    assert marker.marks == []
    ((name, marks),) = writer.isolated
    assert name == "gpu-node-a"
    assert marks[annotation_keys.GPU_UUID] == CARD
    assert writer.events[0].reason is decisions.Reason.GPU_ISOLATION_FAILED


def test_dry_run_starts_nothing() -> None:
    jobs = FakeJobs()
    guard = step.GpuIsolation(jobs, EmptyLedger(), FakeWriter(), FakeMarker(), CATALOG, image="x")
    (outcome,) = guard.run(snapshot(), may_write=lambda: False)
    assert jobs.created == []
    assert outcome.step is step.Step.APPLY


def test_a_held_isolation_gets_its_drafted_request_naming_the_card() -> None:
    jobs, writer, marker = FakeJobs(), FakeWriter(), FakeMarker()
    entry = gpu_isolation.IsolatedGpu(CARD, "0000:2a:00.0", "1", NOW, "xid-48", capacity=4)
    entry = entry.applied("boot-1", NOW, "", confirmed=True)
    node = fleet.Node("gpu-node-a", "boot-1", 3, 3, conditions={"Ready": "True"},
                      labels={gpu_isolation.DEVICE_PLUGIN_LABEL: "excluding",
                              gpu_isolation.DEVICE_PLUGIN_VISIBLE_LABEL: "0-2-3"},
                      annotations={annotation_keys.GPU_ISOLATED:
                                   gpu_isolation.to_annotation((entry,)) or ""})
    guard = step.GpuIsolation(jobs, EmptyLedger(), writer, marker, CATALOG, image="x")
    (outcome,) = guard.run(fleet.FleetSnapshot(NOW, nodes=(node,)), may_write=lambda: True)
    assert outcome.action is not None
    assert outcome.action.reason is decisions.Reason.ESCALATED
    ((_, annotations, labels),) = marker.marks
    text = annotations[annotation_keys.GPU_REQUEST] or ""
    assert text.startswith("GPU 1 of gpu-node-a is out of service")
    assert f"card {CARD}" in text
    assert "reset the GPU" in text
    assert labels == {}
    assert jobs.created == []


@dataclass
class FakeEvictor:
    """The Eviction API: ``blocked`` pods answer 429 (a PodDisruptionBudget)."""

    blocked: set[str] = field(default_factory=set)
    asked: list[str] = field(default_factory=list)

    def evict(self, pod_namespace: str, name: str) -> eviction.Evicted:
        key = f"{pod_namespace}/{name}"
        self.asked.append(key)
        return eviction.Evicted.BLOCKED if key in self.blocked else eviction.Evicted.EVICTED


def held_node(*, evicted: bool = False) -> fleet.Node:
    entry = gpu_isolation.IsolatedGpu(CARD, "0000:2a:00.0", "1", NOW, "xid-48", capacity=4)
    entry = entry.applied("boot-1", NOW, "", confirmed=True)
    entry = entry.with_pods_evicted() if evicted else entry
    return fleet.Node("gpu-node-a", "boot-1", 3, 3, conditions={"Ready": "True"},
                      labels={gpu_isolation.DEVICE_PLUGIN_LABEL: "excluding",
                              gpu_isolation.DEVICE_PLUGIN_VISIBLE_LABEL: "0-2-3"},
                      annotations={annotation_keys.GPU_ISOLATED:
                                   gpu_isolation.to_annotation((entry,)) or ""})


def on_gpu(pod: str, uuid: str = CARD) -> fleet.MetricSample:
    labels = {"node": "gpu-node-a", "uuid": uuid, "namespace": "ml", "pod": pod,
              "container": "main"}
    return fleet.MetricSample(metric_names.GPU_POD, labels, 1.0, NOW)


def evicting(node: fleet.Node, evictor: FakeEvictor) -> tuple[FakeWriter, FakeMarker]:
    """One tick with eviction on: pods train-0 (on the card), other-0 (another GPU) and
    gone-0 (a metric left by a pod the API no longer lists)."""
    writer, marker = FakeWriter(), FakeMarker()
    pods = tuple(fleet.Pod("ml", p, "gpu-node-a", fleet.PodPhase.RUNNING, 1)
                 for p in ("train-0", "train-1", "other-0"))
    samples = (on_gpu("train-0"), on_gpu("train-1"), on_gpu("gone-0"),
               on_gpu("other-0", "GPU-other"))
    guard = step.GpuIsolation(FakeJobs(), EmptyLedger(), writer, marker, CATALOG, image="x",
                              evictor=evictor)
    request = policy.request(node, [], CATALOG)
    node = replace(node, annotations={**node.annotations, annotation_keys.GPU_REQUEST: request})
    snap = fleet.FleetSnapshot(NOW, nodes=(node,), pods=pods, samples=samples)
    guard.run(snap, may_write=lambda: True)
    return writer, marker


def test_opt_in_eviction_evicts_only_the_pods_on_the_held_gpu_once() -> None:
    evictor = FakeEvictor()
    writer, marker = evicting(held_node(), evictor)
    assert evictor.asked == ["ml/train-0", "ml/train-1"]
    ((_, annotations, _),) = marker.marks
    (entry,) = replace(held_node(), annotations={
        annotation_keys.GPU_ISOLATED: annotations[annotation_keys.GPU_ISOLATED] or ""}).marks.gpus
    assert entry.evicted
    (event,) = writer.events
    assert event.reason is decisions.Reason.GPU_PODS_EVICTED
    assert "ml/train-0, ml/train-1" in event.detail
    assert "kubelet PodResources" in event.detail
    again = FakeEvictor()
    evicting(held_node(evicted=True), again)
    assert again.asked == []


def test_a_pod_its_disruption_budget_protects_is_asked_again_next_tick_not_marked_done() -> None:
    evictor = FakeEvictor(blocked={"ml/train-1"})
    writer, marker = evicting(held_node(), evictor)
    assert marker.marks == []
    (event,) = writer.events
    assert "evicted the pods on it (kubelet PodResources): ml/train-0" in event.detail
    assert "not evicted yet" in event.detail
    assert "ml/train-1" in event.detail


def test_eviction_waits_until_the_gpu_is_held_on_this_boot() -> None:
    node = replace(held_node(), boot_id="boot-2")
    evictor = FakeEvictor()
    evicting(node, evictor)
    assert evictor.asked == []
