"""A two-node fleet where gpu-node-b lost GPU 4 to Xid 79 (the fast path), as fake ports for
one guard tick; and that fall as the agent's node condition and as each Prometheus source
shows it a scrape later."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpuguard.model import fleet
from gpuguard.model import metric_names as names
from gpuguard.model import node_conditions as nc
from tests import fakes

NOW = datetime(2026, 9, 21, 5, 53, 30, tzinfo=UTC)
FELL = NOW - timedelta(seconds=1)  # the agent reads the kernel log once a second
UUID = "GPU-5d0ef000-fdad-5f4e-ba38-0edc2d66fd0d"
PCI = "0000:99:00.0"
# ``increase()`` over a counter that went 1 -> 2 within the lookback, extrapolated to the
# range's ends as Prometheus does (the simulator's answer in the xid79-twice scenario)
EXTRAPOLATED_ONE = 1.0000057870370371


def xid79_world() -> tuple[fakes.FakeCluster, fakes.FakeMetrics]:
    nodes = [
        fleet.Node("gpu-node-a", "boot-a", 8, 8, conditions={"Ready": "True"}),
        fleet.Node("gpu-node-b", "boot-b", 8, 7, conditions={"Ready": "True"}),
    ]
    xid = fleet.MetricSample(
        names.DCGM_XID_LAST, {"Hostname": "gpu-node-b", "gpu": "4", "UUID": "GPU-1"}, 79.0, NOW
    )
    return fakes.FakeCluster(nodes), fakes.FakeMetrics([xid])


def gone_from_bus(
    *, xid: int | None = 79, since: datetime = FELL, allocatable: int = 8
) -> fleet.Node:
    """gpu-node-b with the agent's ``GpuFallenOffBus/GpuGoneFromBus`` naming GPU 4 (and Xid
    79 unless ``xid`` is None), before the kubelet lowers allocatable (unless told)."""
    named = nc.GpuNamed("4", PCI, UUID, xid)
    text = nc.message((named,), "the kernel said the GPU fell off the bus")
    fallen = nc.GpuCondition(nc.GPU_FALLEN_OFF_BUS, "True", nc.GONE_FROM_BUS, text, since)
    return fleet.Node("gpu-node-b", "boot-b", 8, allocatable, conditions={"Ready": "True"},
                      gpu_conditions={fallen.type: fallen})  # fmt: skip


def healthy(name: str = "gpu-node-a") -> fleet.Node:
    return fleet.Node(name, f"boot-{name}", 8, 8, conditions={"Ready": "True"})


def xid79_series(source: str, at: datetime) -> list[fleet.MetricSample]:
    """GPU 4's Xid 79 as ``source`` shows it in Prometheus: ``agent`` (its Xid and "fallen
    off the bus" counters, each one extrapolated occurrence), ``dcgm-count``
    (``DCGM_EXP_XID_ERRORS_COUNT``) or ``dcgm-gauge`` (the last-Xid gauge)."""
    agent = {"node": "gpu-node-b", "gpu": "4", "uuid": UUID, "pci": PCI}
    dcgm = {"Hostname": "gpu-node-b", "gpu": "4", "UUID": UUID, "pci_bus_id": "00000000:99:00.0"}
    series = {
        "agent": [
            fleet.MetricSample(names.XID_TOTAL_RECENT, agent | {"xid": "79"}, EXTRAPOLATED_ONE, at),
            fleet.MetricSample(names.FALLEN_OFF_BUS_RECENT, agent, EXTRAPOLATED_ONE, at),
        ],
        "dcgm-count": [fleet.MetricSample(names.XID_COUNT_RECENT, dcgm | {"xid": "79"}, 1.0, at)],
        "dcgm-gauge": [fleet.MetricSample(names.DCGM_XID_LAST, dcgm, 79.0, at)],
    }
    return series[source]
