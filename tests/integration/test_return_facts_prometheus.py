"""The return facts scoped to the nodes the return step evaluates, through a real Prometheus:
for every candidate, the same series as the fleet-wide plan (dcgm-exporter naming the node in
``Hostname`` or ``hostname``, the agent in ``node``), none of the other nodes, and a fleet
split into several scoped queries reads the same."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpuguard.model import fleet, series
from gpuguard.model import metric_names as names
from gpuguard.sources import prometheus as source
from gpuguard.sources import return_facts
from tests.integration import prometheus

pytestmark = pytest.mark.integration

STEP = timedelta(seconds=15)
CANDIDATES = ("gpu-node-a", "gpu-node-b.rack-2", "gpu-node-c")
OTHERS = ("gpu-node-bXrack-2", "gpu-node-a2")  # what an unescaped "." or a prefix would match
LABEL = {"gpu-node-a": "Hostname", "gpu-node-b.rack-2": "hostname", "gpu-node-c": "Hostname"}


def _series(node: str) -> dict[str, tuple[dict[str, str], float]]:
    """A node's series by metric: an x8 link on GPU 1 of node a, an Xid on node c."""
    dcgm = {LABEL.get(node, "Hostname"): node, "gpu": "1", "UUID": f"GPU-{node}"}
    width = 8.0 if node == "gpu-node-a" else 16.0
    return {
        names.DCGM_GPU_UTIL: (dcgm, 0.0),
        names.DCGM_PCIE_LINK_WIDTH: (dcgm, width),
        names.DCGM_PCIE_LINK_GEN: (dcgm, 5.0),
        names.DCGM_ROW_REMAP_PENDING: (dcgm, 0.0),
        names.DCGM_XID_LAST: (dcgm, 79.0 if node == "gpu-node-c" else 0.0),
        names.CHECK_STATUS: ({"node": node, "check": "dns", "status": "PASS"}, 1.0),
        names.KSM_NODE_CAPACITY: ({"node": node, "resource": names.GPU_RESOURCE_LABEL}, 8.0),
    }


def _openmetrics(path: Path, start: datetime, minutes: int) -> None:
    lines: list[str] = []
    for metric in _series(CANDIDATES[0]):
        lines.append(f"# TYPE {metric} gauge")
        for node in (*CANDIDATES, *OTHERS):
            labels, value = _series(node)[metric]
            text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            for i in range(minutes * 4 + 1):
                lines.append(f"{metric}{{{text}}} {value} {(start + i * STEP).timestamp():.0f}")
    path.write_text("\n".join([*lines, "# EOF", ""]))


Seen = tuple[str, tuple[tuple[str, str], ...], float]


def _by_node(samples: Iterable[fleet.MetricSample]) -> dict[str, set[Seen]]:
    found: dict[str, set[Seen]] = defaultdict(set)
    for s in samples:
        if (node := series.node_of(s.labels)) is not None:
            found[node].add((s.name, tuple(sorted(s.labels.items())), s.value))
    return found


def test_scoped_facts_are_the_fleet_wide_facts_of_the_candidates(tmp_path: Path) -> None:
    real_now = datetime.now(UTC).replace(microsecond=0)
    start = real_now - timedelta(days=2) - timedelta(seconds=real_now.timestamp() % 15)
    _openmetrics(tmp_path / "facts.om", start, minutes=10)
    at = start + timedelta(minutes=10)
    plan = return_facts.ReturnFactsPlan(pcie_lookback=timedelta(minutes=10))
    with (
        prometheus.from_openmetrics(tmp_path / "facts.om", tmp_path) as prom,
        closing(source.PrometheusSource(prom.url, plan)) as reader,
    ):
        wide = _by_node(reader.samples(at))
        scoped = return_facts.ReturnFactsSource(reader, plan)
        asked = _by_node(scoped.samples_of(at, CANDIDATES))
        issued = reader.queries_issued
        one_each = return_facts.ReturnFactsSource(reader, plan, max_regex_chars=60)
        batched = _by_node(one_each.samples_of(at, CANDIDATES))
        batched_queries = reader.queries_issued - issued
        none = scoped.samples_of(at, ())
        assert reader.queries_issued - issued == batched_queries  # no nodes: no query
    assert set(wide) == {*CANDIDATES, *OTHERS}
    assert set(asked) == set(CANDIDATES)
    assert {n: asked[n] for n in CANDIDATES} == {n: wide[n] for n in CANDIDATES}
    assert batched == asked
    assert batched_queries == 3 * len(plan.queries())  # one batch per node, freshness in each
    assert none == ()
    assert {seen[0] for seen in asked["gpu-node-b.rack-2"]} >= {
        names.DCGM_PCIE_LINK_WIDTH, return_facts.WIDTH_SEEN_MAX, names.CHECK_STATUS,
    }  # fmt: skip
