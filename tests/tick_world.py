"""A two-node fleet where gpu-node-b lost GPU 4 to Xid 79 (the fast path), as fake ports for
one guard tick."""

from __future__ import annotations

from datetime import UTC, datetime

from gpuguard.model import fleet
from gpuguard.model import metric_names as names
from tests import fakes

NOW = datetime(2026, 9, 21, 5, 53, 30, tzinfo=UTC)


def xid79_world() -> tuple[fakes.FakeCluster, fakes.FakeMetrics]:
    nodes = [
        fleet.Node("gpu-node-a", "boot-a", 8, 8, conditions={"Ready": "True"}),
        fleet.Node("gpu-node-b", "boot-b", 8, 7, conditions={"Ready": "True"}),
    ]
    xid = fleet.MetricSample(
        names.DCGM_XID_LAST, {"Hostname": "gpu-node-b", "gpu": "4", "UUID": "GPU-1"}, 79.0, NOW
    )
    return fakes.FakeCluster(nodes), fakes.FakeMetrics([xid])
