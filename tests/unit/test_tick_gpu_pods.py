"""The tick asks for the pods on the GPUs of the nodes it may name them for, and only those:
a healthy fleet sends no GPU-pods query; a node with a GPU fault gets its pods named as when
the query covered the fleet; a failed read of them fails the tick closed."""

from __future__ import annotations

from datetime import UTC, datetime

from gpuguard.controller import tick
from gpuguard.errors import SourceError
from gpuguard.model import annotation_keys, decisions, fleet, gpu_isolation, settings
from gpuguard.model import metric_names as names
from gpuguard.model import node_conditions as nc
from gpuguard.policy import gpu_pods
from tests import fakes
from tests.builders import Classifier

NOW = datetime(2026, 8, 10, 15, 46, tzinfo=UTC)
FAULTY, HEALTHY = "gpu-node-a", "gpu-node-c"


def node(name: str, allocatable: int = 4, **kwargs: object) -> fleet.Node:
    return fleet.Node(name, f"boot-{name}", 4, allocatable, conditions={"Ready": "True"},
                      **kwargs)  # type: ignore[arg-type]


def on_gpu(node_name: str, pod: str) -> fleet.MetricSample:
    labels = {"Hostname": node_name, "gpu": "1", "UUID": "GPU-card-1", "namespace": "ml",
              "pod": pod}
    return fleet.MetricSample(names.DCGM_GPU_PODS, labels, 1.0, NOW)


def fault_samples() -> list[fleet.MetricSample]:
    """An agent-seen Xid 48 on GPU 1 of the faulty node and its GPU loss held."""
    labels = {"node": FAULTY, "gpu": "1", "uuid": "GPU-card-1", "pci": "0000:2a:00.0",
              "xid": "48"}
    return [fleet.MetricSample(names.XID_TOTAL_RECENT, labels, 1.0, NOW),
            fleet.MetricSample(names.GPU_LOSS_HELD, {"node": FAULTY}, 1.0, NOW)]


def ticked(
    main: list[fleet.MetricSample], pods: fakes.FakeMetrics
) -> tuple[tick.TickResult, fakes.FakeWriter]:
    writer = fakes.FakeWriter()
    guard = tick.Guard(
        metrics=fakes.FakeMetrics(main),
        pods_on_gpus=pods,
        cluster=fakes.FakeCluster([node(FAULTY, allocatable=3 if main else 4), node(HEALTHY)]),
        writer=writer,
        classifier=Classifier(),
        settings=settings.GuardSettings(),
        clock=fakes.FakeClock(NOW),
    )
    return guard.tick(), writer


def test_a_healthy_fleet_sends_no_gpu_pods_query() -> None:
    pods = fakes.FakeMetrics([on_gpu(FAULTY, "train-0"), on_gpu(HEALTHY, "serve-0")])
    result, _ = ticked([], pods)
    assert result.ok
    assert result.decision is not None
    assert pods.asked_nodes == []


def test_a_node_with_a_gpu_fault_gets_the_pods_on_it_named() -> None:
    pods = fakes.FakeMetrics([on_gpu(FAULTY, "train-0"), on_gpu(HEALTHY, "serve-0")])
    result, _ = ticked(fault_samples(), pods)
    assert pods.asked_nodes == [(FAULTY,)]
    assert result.decision is not None
    (action,) = result.decision.actions
    assert action.kind is decisions.ActionKind.ISOLATE_GPU
    assert "pods on it (dcgm-exporter): ml/train-0: left running, not evicted" in action.detail


def test_a_failed_gpu_pods_read_fails_the_tick_closed() -> None:
    result, writer = ticked(fault_samples(), fakes.FakeMetrics(error=SourceError("HTTP 503")))
    assert result.error_kind == "source"
    assert result.decision is None
    assert writer.isolated == []
    assert writer.annotated == []


def test_nodes_with_a_gone_gpu_condition_or_an_isolated_gpu_are_asked_about() -> None:
    gone = {nc.GPU_FALLEN_OFF_BUS: nc.GpuCondition(nc.GPU_FALLEN_OFF_BUS, "True",
                                                   nc.GONE_FROM_BUS)}
    entry = gpu_isolation.IsolatedGpu("GPU-card-1", "0000:2a:00.0", "1", NOW, "xid-48",
                                      capacity=4, applied_boot="boot-gpu-node-i")
    marks = {annotation_keys.GPU_ISOLATED: gpu_isolation.to_annotation((entry,)) or ""}
    nodes = (node("gpu-node-g", gpu_conditions=gone), node("gpu-node-i", annotations=marks),
             node(HEALTHY))
    snapshot = fleet.FleetSnapshot(NOW, nodes=nodes)
    assert gpu_pods.nodes_to_name(snapshot) == ("gpu-node-g", "gpu-node-i")
