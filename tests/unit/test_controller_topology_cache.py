"""The agent's GPU topology kept between fleet-health runs (docs/fleet-health.md#topology):
read fleet-wide at most every ``topology_refresh``, new nodes read on their own, a failed
refresh keeping answers at most twice the refresh, and the same findings as reading every
node's topology every minute."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from gpuguard.controller import fleet_health, topology_cache
from gpuguard.errors import SourceError
from gpuguard.model import fleet
from gpuguard.model import metric_names as mn
from gpuguard.model import settings as settings_model
from gpuguard.sources import fleet_health as health_source
from gpuguard.sources import node_scope
from tests import tools
from tests.fakes import FakeMetrics, FakeWorkloadPods

NOW = datetime(2026, 9, 1, 12, 0, tzinfo=UTC)
SETTINGS = settings_model.FleetHealthSettings()
REFRESH = SETTINGS.topology_refresh
TOPOLOGY = {mn.GPU_NVLINK_PEER, mn.GPU_NUMA_NODE}
LOOKBACK = health_source.TopologyChangesPlan().since


def matrix(node: str, gpus: int = 4) -> list[fleet.MetricSample]:
    """Four GPUs, NVLink-joined in pairs 0-1 and 2-3 (one pair per NUMA node), SYS between."""
    links = [
        fleet.MetricSample(mn.GPU_NVLINK_PEER,
                           {"node": node, "gpu": str(a), "peer": str(b),
                            "link": "NV12" if (a, b) in {(0, 1), (2, 3)} else "SYS"}, 1.0, NOW)
        for a in range(gpus) for b in range(a + 1, gpus)
    ]  # fmt: skip
    numa = [
        fleet.MetricSample(mn.GPU_NUMA_NODE, {"node": node, "gpu": str(g), "numa": str(g // 2)},
                           1.0, NOW)
        for g in range(gpus)
    ]  # fmt: skip
    return links + numa


def held(node: str, pod: str, *gpus: int) -> list[fleet.MetricSample]:
    """dcgm-exporter's pod mapping: ``pod`` holds ``gpus`` of ``node``."""
    return [
        fleet.MetricSample(mn.GPU_POD_MAPPING, {"Hostname": node, "gpu": str(g),
                           "exported_namespace": "ml", "exported_pod": pod}, 1.0, NOW)
        for g in gpus
    ]  # fmt: skip


@dataclass
class Changes:
    """The change check (``TopologyChangesPlan``) as Prometheus answers it: the nodes whose
    topology series changed within the lookback before the asked instant."""

    at: dict[str, datetime] = field(default_factory=dict)  # node -> when its matrix changed
    error: Exception | None = None
    asked_at: list[datetime] = field(default_factory=list)

    def samples(self, at: datetime) -> tuple[fleet.MetricSample, ...]:
        self.asked_at.append(at)
        if self.error is not None:
            raise self.error
        return tuple(fleet.MetricSample(mn.GPU_TOPOLOGY_CHANGES, {"node": node}, 1.0, at)
                     for node, when in self.at.items() if at - LOOKBACK < when <= at)  # fmt: skip


class World:
    """One Prometheus answering the fleet-health plan without topology (``health``), the
    topology plan fleet-wide (``every``) and scoped (``scoped``); ``full``: the uncached plan."""

    def __init__(self, series: list[fleet.MetricSample]) -> None:
        self.series = series
        self.every = FakeMetrics(self.topology_series)
        self.scoped = FakeMetrics(self.topology_series)
        self.health = FakeMetrics(self.health_series)
        self.full = FakeMetrics(self.series)
        self.changes = Changes()

    @property
    def topology_series(self) -> list[fleet.MetricSample]:
        return [s for s in self.series if s.name in TOPOLOGY]

    @property
    def health_series(self) -> list[fleet.MetricSample]:
        return [s for s in self.series if s.name not in TOPOLOGY]

    def add(self, series: list[fleet.MetricSample]) -> None:
        self.series += series
        for fake, kept in ((self.every, self.topology_series), (self.scoped, self.topology_series),
                           (self.health, self.health_series), (self.full, self.series)):
            fake.series = kept  # fmt: skip

    def replace_matrix(self, node: str, series: list[fleet.MetricSample], at: datetime) -> None:
        """The agent publishes another matrix for ``node`` (a GPU gone) at ``at``."""
        self.series = [s for s in self.series if s.name not in TOPOLOGY or s.labels["node"] != node]
        self.add(series)
        self.changes.at[node] = at

    def fail(self, error: Exception | None) -> None:
        self.every.error = self.scoped.error = self.changes.error = error

    def cached(self) -> fleet_health.FleetHealthWatch:
        cache = topology_cache.TopologyCache(self.every, self.scoped, REFRESH,
                                             changes=self.changes, changes_cover=LOOKBACK)
        return fleet_health.FleetHealthWatch(FakeWorkloadPods([]), self.health, SETTINGS,
                                             topologies=cache)  # fmt: skip

    def uncached(self) -> fleet_health.FleetHealthWatch:
        return fleet_health.FleetHealthWatch(FakeWorkloadPods([]), self.full, SETTINGS)


def fleet_world() -> World:
    """node-a's pod holds GPUs 1 and 2 (across NVLink pairs and NUMA nodes): a mismatch."""
    return World(matrix("node-a") + matrix("node-b") + held("node-a", "split", 1, 2)
                 + held("node-b", "paired", 0, 1))  # fmt: skip


def mismatched(health: fleet_health.FleetHealth) -> list[str]:
    return sorted(f.node for f in health.findings if f.kind == "topology-mismatch")


def test_a_run_within_the_refresh_reads_no_topology_and_finds_the_same() -> None:
    world = fleet_world()
    watch = world.cached()
    first = watch.run(NOW)
    second = watch.run(NOW + timedelta(minutes=1))
    assert world.every.asked_at == [NOW]
    assert world.scoped.asked_nodes == []
    assert mismatched(first) == mismatched(second) == ["node-a"]


def test_a_new_node_is_read_on_its_own_and_judged() -> None:
    world = fleet_world()
    watch = world.cached()
    watch.run(NOW)
    world.add(matrix("node-c") + held("node-c", "split", 0, 3))
    health = watch.run(NOW + timedelta(minutes=1))
    assert world.every.asked_at == [NOW]
    assert world.scoped.asked_nodes == [("node-c",)]
    assert mismatched(health) == ["node-a", "node-c"]
    watch.run(NOW + timedelta(minutes=2))
    assert world.scoped.asked_nodes == [("node-c",)]  # kept from then on


def test_a_node_without_topology_is_asked_again_on_its_own_and_never_judged() -> None:
    world = fleet_world()
    world.add(held("node-d", "split", 1, 2))  # the agent published no matrix there
    watch = world.cached()
    first = watch.run(NOW)
    second = watch.run(NOW + timedelta(minutes=1))
    assert world.every.asked_at == [NOW]
    assert world.scoped.asked_nodes == [("node-d",)]
    assert mismatched(first) == mismatched(second) == ["node-a"]


def test_only_nodes_with_multi_gpu_pods_need_a_topology() -> None:
    world = World(matrix("node-a") + held("node-a", "one", 1) + held("node-a", "other", 2))
    world.cached().run(NOW)
    assert world.every.asked_at == []


def test_every_node_is_read_again_after_the_refresh() -> None:
    world = fleet_world()
    watch = world.cached()
    for minutes in range(0, 31):
        watch.run(NOW + timedelta(minutes=minutes))
    assert world.every.asked_at == [NOW, NOW + REFRESH]


def test_a_failed_refresh_keeps_answers_until_twice_the_refresh_then_topology_is_unknown() -> None:
    world = fleet_world()
    watch = world.cached()
    watch.run(NOW)
    world.fail(SourceError("prometheus: 503"))
    kept = watch.run(NOW + REFRESH)
    assert mismatched(kept) == ["node-a"]
    assert any(u.startswith("topology: fleet-wide refresh refused") for u in kept.unchecked)
    expired = watch.run(NOW + 2 * REFRESH)
    assert mismatched(expired) == []  # as with no topology: unknown, never a guess
    blind = fleet_health.FleetHealthWatch(FakeWorkloadPods([]), world.health, SETTINGS)
    assert expired.findings == blind.run(NOW + 2 * REFRESH).findings
    assert any(u.startswith("topology: 2 node(s) unread") for u in expired.unchecked)
    world.fail(None)
    assert mismatched(watch.run(NOW + 2 * REFRESH + timedelta(minutes=1))) == ["node-a"]


def test_findings_are_those_of_reading_every_topology_every_minute() -> None:
    world = fleet_world()
    cached, uncached = world.cached(), world.uncached()
    changes = {3: matrix("node-c") + held("node-c", "split", 0, 3),
               40: held("node-b", "late", 1, 3), 50: held("node-e", "split", 0, 2)}  # fmt: skip
    for minute in range(0, 70):
        world.add(changes.get(minute, []))
        at = NOW + timedelta(minutes=minute)
        if minute == 10:  # node-a loses GPUs 2 and 3: its split pod's GPU 2 is unknown now
            world.replace_matrix("node-a", matrix("node-a", gpus=2), at)
        if minute == 20:  # and gets them back
            world.replace_matrix("node-a", matrix("node-a"), at)
        assert cached.run(at).findings == uncached.run(at).findings, minute
    assert len(world.every.asked_at) == 3  # 0, 30 and 60 minutes: the rest was kept


def test_a_restarted_guard_reads_every_node_first() -> None:
    world = fleet_world()
    world.cached().run(NOW)
    world.cached().run(NOW + timedelta(minutes=1))
    assert world.every.asked_at == [NOW, NOW + timedelta(minutes=1)]


def test_the_topology_plan_asks_for_the_given_nodes_only() -> None:
    fleet_wide = health_source.TopologyPlan().queries()
    scoped = health_source.TopologyPlan(("node-a", "node.b")).queries()
    assert fleet_wide.keys() == scoped.keys() >= TOPOLOGY
    assert node_scope.scope_of(fleet_wide[mn.GPU_NVLINK_PEER]) is None
    assert node_scope.scope_of(scoped[mn.GPU_NVLINK_PEER]) == ("node-a", "node.b")
    assert node_scope.scope_of(scoped[mn.GPU_NUMA_NODE]) == ("node-a", "node.b")
    plan = health_source.HealthQueryPlan.for_settings(SETTINGS, topology=False)
    assert not plan.queries().keys() & TOPOLOGY
    with_topology = health_source.HealthQueryPlan.for_settings(SETTINGS).queries()
    assert {k: with_topology[k] for k in TOPOLOGY} == {k: fleet_wide[k] for k in TOPOLOGY}


def test_the_refresh_must_be_positive() -> None:
    with pytest.raises(ValidationError, match="topology_refresh"):
        settings_model.FleetHealthSettings(topology_refresh=timedelta(0))


def test_a_node_whose_topology_changed_is_read_again_on_its_own() -> None:
    world = fleet_world()
    watch = world.cached()
    assert mismatched(watch.run(NOW)) == ["node-a"]
    later = NOW + timedelta(minutes=1)
    world.replace_matrix("node-a", matrix("node-a", gpus=2), later)
    assert mismatched(watch.run(later)) == []  # GPU 2 of the split pod: unknown now
    assert world.scoped.asked_nodes == [("node-a",)]
    assert world.every.asked_at == [NOW]


def test_a_gap_in_the_change_checks_reads_every_node_again() -> None:
    world = fleet_world()
    watch = world.cached()
    watch.run(NOW)
    watch.run(NOW + LOOKBACK)
    assert world.every.asked_at == [NOW]
    watch.run(NOW + 2 * LOOKBACK + timedelta(seconds=1))  # a change could hide in between
    assert world.every.asked_at == [NOW, NOW + 2 * LOOKBACK + timedelta(seconds=1)]


def test_a_refused_change_check_keeps_the_answers_within_their_bound() -> None:
    world = fleet_world()
    watch = world.cached()
    watch.run(NOW)
    world.changes.error = SourceError("prometheus: 503")
    health = watch.run(NOW + timedelta(minutes=1))
    assert mismatched(health) == ["node-a"]
    assert any(u.startswith("topology: change check refused") for u in health.unchecked)


def test_the_change_check_names_a_node_whose_matrix_changed_under_promtool(
    tmp_path: Path,
) -> None:
    """node-a's GPU0-GPU1 cell is read again as SYS at 9 min (a series new, the old one gone
    at 10): node-b's stays. The check names node-a while either is within its lookback."""
    query = health_source.TopologyChangesPlan().queries()[mn.GPU_TOPOLOGY_CHANGES]
    cell = 'gpuguard_gpu_link{{node="{}",gpu="0",peer="1",link="{}",instance="{}:9400"}}'
    tests = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": cell.format("node-a", "NV12", "node-a"), "values": "1x9 stale"},
                {"series": cell.format("node-a", "SYS", "node-a"), "values": "_x9 1x30"},
                {"series": cell.format("node-b", "NV12", "node-b"), "values": "1x40"},
                {"series": 'gpuguard_gpu_numa_node{node="node-b",gpu="0",numa="0"}',
                 "values": "1x40"},
            ],
            "promql_expr_test": [
                {"expr": query, "eval_time": "6m", "exp_samples": []},
                {"expr": query, "eval_time": "12m",
                 "exp_samples": [{"labels": '{node="node-a"}', "value": 2}]},
                {"expr": query, "eval_time": "30m", "exp_samples": []},
            ],
        }],
    }  # fmt: skip
    tools.promtool_test(tests, tmp_path)


def test_many_nodes_to_read_are_read_as_the_whole_fleet() -> None:
    world = fleet_world()
    watch = world.cached()
    assert watch.topologies is not None
    watch.topologies.most_batches = 0
    watch.run(NOW)
    later = NOW + timedelta(minutes=1)
    world.add(matrix("node-c") + held("node-c", "split", 0, 3)
              + matrix("node-d") + held("node-d", "split", 1, 2))  # fmt: skip
    assert mismatched(watch.run(later)) == ["node-a", "node-c", "node-d"]
    assert world.every.asked_at == [NOW, later]
    assert world.scoped.asked_nodes == []
