"""The tick's Prometheus answers hold what is wrong, not every GPU (``sources.prometheus``):
the Xid gauge and its value a lookback ago are asked ``> 0``, the held GPU loss ``> 0``. A
comparison without ``bool`` drops the series it is false for (Prometheus docs,
``docs/querying/operators.md#comparison-binary-operators``), so a 0 arrives as no series.
These tests hold the decisions to that: every gauge history, every held value, decides the
same with its zeros answered or dropped. And a healthy simulated fleet answers no per-GPU
series at all, only the per-node freshness (one series per node, which must stay: absence
there means silent)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from gpuguard.model import fleet, settings
from gpuguard.model import metric_names as names
from gpuguard.policy import gpu_pods, isolate, xid_signals
from gpuguard.sim import clock, prometheus_view, scenario, store, world
from tests.builders import Classifier

NOW = datetime(2026, 9, 21, 5, 53, 30, tzinfo=UTC)
NODE = "gpu-node-a"
LABELS = {"Hostname": NODE, "gpu": "4", "UUID": "GPU-4", "pci_bus_id": "00000000:99:00.0"}
GAUGE_VALUES = (None, 0, 13, 48, 79)  # absent, no Xid, user-class, hardware, hardware
NODE_ONLY = settings.GuardSettings.model_validate({"gpu_isolation": {"enabled": False}})


def gauge(name: str, value: int | None, pod: str = "") -> list[fleet.MetricSample]:
    labels = LABELS | ({"namespace": "ml", "pod": pod} if pod else {})
    return [] if value is None else [fleet.MetricSample(name, labels, float(value), NOW)]


def answered(samples: list[fleet.MetricSample]) -> list[fleet.MetricSample]:
    """What the tick's ``> 0`` queries answer of these series: the positive ones."""
    filtered = (names.DCGM_XID_LAST, names.XID_LAST_24H_AGO, names.GPU_LOSS_HELD)
    return [s for s in samples if s.name not in filtered or s.value > 0]


def node(allocatable: int) -> fleet.Node:
    return fleet.Node(name=NODE, boot_id="boot-a", gpu_capacity=8,
                      gpu_allocatable=allocatable, conditions={"Ready": "True"})  # fmt: skip


def decided(samples: list[fleet.MetricSample], allocatable: int) -> dict[str, object]:
    snap = fleet.FleetSnapshot(taken_at=NOW, nodes=(node(allocatable),), samples=tuple(samples))
    decision = isolate.decide(snap, Classifier(), NODE_ONLY)
    return {a.node: (a.kind, a.reason) for a in decision.actions}


def signals(samples: list[fleet.MetricSample]) -> list[tuple[str, int | None]]:
    found = xid_signals.hardware_xids(samples, Classifier())
    return [(s.gpu, s.xid) for s in found.get(NODE, [])]


@pytest.mark.parametrize(("day_ago", "now"), list(itertools.product(GAUGE_VALUES, repeat=2)))
def test_every_gauge_history_decides_the_same_with_its_zeros_dropped(
    day_ago: int | None, now: int | None
) -> None:
    every = gauge(names.DCGM_XID_LAST, now) + gauge(names.XID_LAST_24H_AGO, day_ago)
    assert signals(answered(every)) == signals(every)
    for loss in (None, 0, 1):  # no loss series, a loss not held, one held through the window
        held = [] if loss is None else [fleet.MetricSample(names.GPU_LOSS_HELD, {"node": NODE},
                                                           float(loss), NOW)]  # fmt: skip
        for allocatable in (8, 7):
            assert decided(answered(every + held), allocatable) == decided(every + held,
                                                                           allocatable)


@pytest.mark.parametrize(
    ("day_ago", "now", "expected"),
    [
        pytest.param(13, 79, [("4", 79)], id="user-xid-yesterday-then-hardware-xid-today"),
        pytest.param(79, 79, [], id="the-same-hardware-xid-still-showing-a-day-later"),
        pytest.param(0, 79, [("4", 79)], id="healthy-yesterday-dropped-reads-as-different"),
        pytest.param(None, 48, [("4", 48)], id="no-series-yesterday"),
        pytest.param(79, 0, [], id="cleared-today"),
        pytest.param(48, 79, [("4", 79)], id="another-hardware-xid-today"),
    ],
)
def test_the_filtered_gauge_keeps_what_the_lookback_says(
    day_ago: int | None, now: int, expected: list[tuple[str, int]]
) -> None:
    every = gauge(names.DCGM_XID_LAST, now) + gauge(names.XID_LAST_24H_AGO, day_ago)
    assert signals(answered(every)) == expected


def test_the_pods_on_a_gpu_are_todays_not_the_ones_a_day_ago() -> None:
    """A GPU whose last Xid is 0 has its pod in the pods query; the day-ago series names the
    pod on the GPU then, which may run elsewhere now."""
    today = [fleet.MetricSample(names.DCGM_GPU_PODS, LABELS | {"namespace": "ml", "pod": "now"},
                                1.0, NOW)]  # fmt: skip
    day_ago = gauge(names.XID_LAST_24H_AGO, 79, pod="yesterday")
    assert gpu_pods.on_gpu(NODE, "GPU-4", today + day_ago) == gpu_pods.OnGpu(
        ("ml/now",), gpu_pods.DCGM
    )
    faulty = gauge(names.DCGM_XID_LAST, 79, pod="running")
    assert gpu_pods.on_gpu(NODE, "GPU-4", faulty + day_ago).pods == ("ml/running",)


HEALTHY = """
name: healthy-busy-fleet
xid_gauge_zero: true
fleet: {nodes: [gpu-node-a, gpu-node-b, gpu-node-c], gpus_per_node: 8}
events:
  - {at: 0s, workload: {node: gpu-node-a, gpus: [0, 1], profile: training, name: train}}
  - {at: 10m, xid: {node: gpu-node-b, gpu: 5, xid: 13}}
"""


@pytest.fixture(scope="module")
def healthy() -> tuple[prometheus_view.WorldPrometheus, datetime]:
    spec = scenario.loads(HEALTHY)
    the_world = world.World.from_scenario(spec, store.ObjectStore(), clock.SimClock(spec.start))
    view = prometheus_view.WorldPrometheus(the_world, timedelta(minutes=10), timedelta(hours=24))
    view.scrape()
    the_world.run(step=prometheus_view.SCRAPE, until=timedelta(minutes=12),
                  on_step=lambda _: view.scrape())  # fmt: skip
    return view, the_world.now


def test_a_healthy_fleet_answers_one_series_per_node_and_the_faults(
    healthy: tuple[prometheus_view.WorldPrometheus, datetime],
) -> None:
    """The exporter has an Xid series (0) for each of the 24 GPUs; the answer holds per node
    only the exporter's freshness, per GPU only the user Xid on gpu-node-b; the pod on
    gpu-node-a's two busy GPUs comes only when that node's GPU pods are asked for."""
    view, at = healthy
    answer = view.samples(at)
    by_name = {name: sorted(xid_signals.node_of(s.labels) or "" for s in group)
               for name, group in itertools.groupby(sorted(answer, key=lambda s: s.name),
                                                    key=lambda s: s.name)}  # fmt: skip
    assert by_name == {
        names.DCGM_NODE_NEWEST: ["gpu-node-a", "gpu-node-b", "gpu-node-c"],
        names.DCGM_XID_LAST: ["gpu-node-b"],
    }
    assert view.samples_of(at, ["gpu-node-c"]) == ()
    pods = view.samples_of(at, ["gpu-node-a"])
    assert sorted(s.labels["gpu"] for s in pods if s.name == names.DCGM_GPU_PODS) == ["0", "1"]
    on_busy = {gpu_pods.on_gpu("gpu-node-a", s.labels["UUID"], pods) for s in pods}
    assert len(on_busy) == 1
    (found,) = on_busy
    assert found.source == gpu_pods.DCGM
    assert [pod.split("/")[1] for pod in found.pods] == ["train"]
