"""Scheduling and interconnect health in the guard's loop (docs/fleet-health.md): findings from
pods and Prometheus, one Event per deadlock on the job's owner (leader only), each source
failing on its own, gauges for the alert rules, and nothing ever written to a workload or node
beyond that Event."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpuguard.controller import fleet_health, telemetry, tick
from gpuguard.errors import GpuguardError, SourceError
from gpuguard.model import fleet, workloads
from gpuguard.model import metric_names as mn
from gpuguard.model import settings as settings_model
from tests.builders import Classifier
from tests.fakes import (
    FakeClock,
    FakeCluster,
    FakeMetrics,
    FakeWorkloadEvents,
    FakeWorkloadPods,
    FakeWriter,
)

NOW = datetime(2026, 9, 1, 12, 0, tzinfo=UTC)
OWNER = workloads.OwnerRef("MPIJob", "bert", controller=True, api_version="kubeflow.org/v2beta1",
                           uid="u-1")  # fmt: skip
LABELS = {"training.kubeflow.org/job-name": "bert"}


def stuck_job() -> list[workloads.WorkloadPod]:
    since = NOW - timedelta(minutes=30)
    return [
        workloads.WorkloadPod("ml", "bert-worker-0", "gpu-node-1", "Running", 8, LABELS,
                              owners=(OWNER,)),
        workloads.WorkloadPod("ml", "bert-worker-1", None, "Pending", 8, LABELS, owners=(OWNER,),
                              unschedulable_since=since),
    ]  # fmt: skip


def throttled() -> fleet.MetricSample:
    labels = {"Hostname": "gpu-node-2", "gpu": "1", "UUID": "GPU-1", "reason": "hw-thermal"}
    return fleet.MetricSample(mn.windowed(mn.THROTTLE_FRACTION, mn.SHORT), labels, 0.8, NOW)


def watch(**changes: object) -> fleet_health.FleetHealthWatch:
    base = fleet_health.FleetHealthWatch(
        pods=FakeWorkloadPods(stuck_job()),
        metrics=FakeMetrics([throttled()]),
        settings=settings_model.FleetHealthSettings(),
        events=FakeWorkloadEvents(),
    )
    for key, value in changes.items():
        setattr(base, key, value)
    return base


def test_findings_from_pods_and_prometheus() -> None:
    health = watch().run(NOW)
    kinds = sorted(f.kind for f in health.findings)
    assert kinds == ["gang-partial-allocation", "gpu-throttled"]
    assert health.gangs[0].gpus_held == 8


def test_one_event_per_deadlock_on_its_owner_and_only_when_leading() -> None:
    events = FakeWorkloadEvents()
    w = watch(events=events, every=timedelta(0))
    w.run(NOW, may_write=lambda: False)
    assert events.recorded == []  # a standby writes nothing
    w.run(NOW + timedelta(minutes=1), may_write=lambda: True)
    w.run(NOW + timedelta(minutes=2), may_write=lambda: True)
    [(namespace, about, finding)] = events.recorded
    assert (namespace, about) == ("ml", OWNER)
    assert "bert-worker-1" in finding.evidence[2].value


def test_a_job_that_recovered_and_stuck_again_is_told_again() -> None:
    events, pods = FakeWorkloadEvents(), FakeWorkloadPods(stuck_job())
    w = watch(events=events, pods=pods, every=timedelta(0))
    w.run(NOW, may_write=lambda: True)
    pods.pod_list = []
    w.run(NOW + timedelta(minutes=1), may_write=lambda: True)
    pods.pod_list = stuck_job()
    w.run(NOW + timedelta(minutes=2), may_write=lambda: True)
    assert len(events.recorded) == 2


def test_a_failed_event_is_retried_next_time() -> None:
    events = FakeWorkloadEvents(error=GpuguardError("events is forbidden"))
    w = watch(events=events, every=timedelta(0))
    w.run(NOW, may_write=lambda: True)
    events.error = None
    w.run(NOW + timedelta(minutes=1), may_write=lambda: True)
    assert len(events.recorded) == 1


def test_each_source_fails_on_its_own() -> None:
    no_pods = watch(pods=FakeWorkloadPods(error=SourceError("listing Pods: 503"))).run(NOW)
    assert [f.kind for f in no_pods.findings] == ["gpu-throttled"]
    assert any("pods unreadable" in u for u in no_pods.unchecked)
    no_prom = watch(metrics=FakeMetrics(error=SourceError("stale"))).run(NOW)
    assert [f.kind for f in no_prom.findings] == ["gang-partial-allocation"]
    assert any("Prometheus answer refused" in u for u in no_prom.unchecked)


def test_runs_once_per_interval() -> None:
    metrics = FakeMetrics([throttled()])
    w = watch(metrics=metrics)
    first = w.run(NOW)
    assert w.run(NOW + timedelta(seconds=30)) is first
    w.run(NOW + timedelta(minutes=1))
    assert len(metrics.asked_at) == 2


def test_the_tick_runs_it_guarded_and_telemetry_exports_the_gauges() -> None:
    node = fleet.Node("gpu-node-1", "boot-1", 8, 8, conditions={"Ready": "True"})
    writer = FakeWriter()
    guard = tick.Guard(
        metrics=FakeMetrics([]), cluster=FakeCluster([node]), writer=writer,
        classifier=Classifier(), settings=settings_model.GuardSettings(),
        clock=FakeClock(NOW), fleet_health=watch(),
    )  # fmt: skip
    result = guard.tick()
    assert result.fleet_health is not None
    assert len(result.fleet_health.findings) == 2
    metrics = telemetry.GuardMetrics()
    metrics.observe(result)
    text = metrics.exposition().decode()
    gang = 'gpuguard_gang_gpu_hours_held{job="bert",namespace="ml",system="training-operator"}'
    assert f"{gang} 4.0" in text  # 8 GPUs held for 30 min
    throttle = 'gpuguard_fleet_health_finding{gpu="1",kind="gpu-throttled",node="gpu-node-2"}'
    assert f"{throttle} 1.0" in text
    assert writer.isolated == []
    assert writer.annotated == []


def test_a_crashing_step_costs_only_itself() -> None:
    class Broken(FakeWorkloadPods):
        def pods(self) -> tuple[workloads.WorkloadPod, ...]:
            raise RuntimeError("boom")

    guard = tick.Guard(
        metrics=FakeMetrics([]), cluster=FakeCluster([]), writer=FakeWriter(),
        classifier=Classifier(), settings=settings_model.GuardSettings(),
        clock=FakeClock(NOW), fleet_health=watch(pods=Broken()),
    )  # fmt: skip
    result = guard.tick()
    assert result.fleet_health is None
    assert [step for step, _ in result.step_errors] == ["fleet-health"]


def test_an_answer_with_no_series_at_all_reads_as_nothing_checked() -> None:
    """The guard's plan asks only for what can make a finding: a fleet that runs no workload
    and whose exporters collect none of the kinds answers no series at all, which is no check
    of any of them, never a healthy fleet."""
    health = watch(metrics=FakeMetrics([])).run(NOW)
    assert not [f for f in health.findings if f.kind != "gang-partial-allocation"]
    assert sorted(u.split(":")[0] for u in health.unchecked) == [
        "gpu-throttled", "ib-link-flapping", "nvlink-errors", "pcie-replays"]  # fmt: skip
