"""A GPU node whose dcgm-exporter went silent is named, never read as healthy; a node that is
down, or has no GPUs, is not asked."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpuguard.model import decisions, fleet
from gpuguard.model import metric_names as names
from gpuguard.policy import freshness

AT = datetime(2026, 9, 21, 6, 0, tzinfo=UTC)
STALENESS = timedelta(minutes=2)


def node(name: str, gpus: int = 8, ready: bool = True) -> fleet.Node:
    return fleet.Node(name, "b", gpus, gpus, conditions={"Ready": "True" if ready else "False"})


def newest(
    name: str, age: timedelta, label: str = "Hostname", series: str = names.DCGM_NODE_NEWEST
) -> fleet.MetricSample:
    return fleet.MetricSample(series, {label: name}, (AT - age).timestamp(), AT)


def found(
    nodes: list[fleet.Node], samples: list[fleet.MetricSample]
) -> tuple[decisions.Finding, ...]:
    snapshot = fleet.FleetSnapshot(taken_at=AT, nodes=tuple(nodes), samples=tuple(samples))
    return freshness.silent_exporters(snapshot, STALENESS)


def silent(nodes: list[fleet.Node], samples: list[fleet.MetricSample]) -> dict[str, str]:
    findings = found(nodes, samples)
    assert {f.reason for f in findings} <= {decisions.Reason.EXPORTER_SILENT}
    return {f.node: f.detail for f in findings}


def test_a_stale_or_missing_exporter_is_silent_while_the_others_are_fresh() -> None:
    found = silent(
        [node("fresh"), node("stale"), node("gone"), node("lower")],
        [newest("fresh", timedelta(seconds=15)), newest("stale", timedelta(minutes=3)),
         newest("lower", timedelta(seconds=30), label="hostname")],
    )  # fmt: skip
    assert set(found) == {"stale", "gone"}
    assert found["stale"].startswith("newest dcgm-exporter sample is 0:03:00 old (bound 0:02:00)")
    assert found["gone"].startswith("no dcgm-exporter sample for this node")


def test_nodes_that_are_down_or_have_no_gpus_are_not_asked() -> None:
    assert silent([node("rebooting", ready=False), node("cpu-only", gpus=0)], []) == {}


def test_a_node_without_its_agent_is_agent_silent_once_any_agent_is_scraped() -> None:
    fresh = [newest(n, timedelta(seconds=15)) for n in ("a", "b")]
    agent_a = newest("a", timedelta(seconds=15), "node", names.AGENT_NODE_NEWEST)
    nodes = [node("a"), node("b")]
    assert found(nodes, fresh) == ()  # no agent scraped anywhere: not deployed, nothing to say
    (lost,) = found(nodes, [*fresh, agent_a])
    assert (lost.node, lost.reason) == ("b", decisions.Reason.AGENT_SILENT)
    assert lost.detail.startswith("no gpuguard agent sample for this node")


def test_a_newest_time_that_is_no_time_counts_as_silent() -> None:
    absurd = fleet.MetricSample(names.DCGM_NODE_NEWEST, {"Hostname": "a"}, 1e20, AT)
    assert set(silent([node("a")], [absurd])) == {"a"}
