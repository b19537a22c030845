"""The simulator's own Prometheus answers for ``gpuguard sim serve`` without a ``prometheus``
binary: gpuguard's queries, by their exact text, answered from the emulation
(``sim.prometheus_view``, ``sim.return_view``) and served over Prometheus' HTTP API
(``sim.prometheus_api``).

Only the queries gpuguard itself sends with the given settings are known — the plans of
``sources.prometheus``, ``sources.return_facts``, ``sources.gpu_pods``, ``sources.gpu_metrics`` and
``sources.fleet_health`` (answered by ``sim.fleet_view``) — so ``gpuguard
run|status|explain --prometheus-url`` work against it with the same settings; any other query
gets Prometheus' ``bad_data`` error saying so. The emulation's semantics are not changed here.

The scenario may run faster than the wall clock (``--speed``); the samples Prometheus would have
stamped are in wall time, so a query's instant is taken to the scenario's time (``origin +
(at - origin) * speed``, never past the world's present) and a value that is a time
(``timestamp()`` queries) is taken back to wall time.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial

from gpuguard.demo import findings
from gpuguard.errors import SourceError
from gpuguard.model import fleet, series
from gpuguard.model import metric_names as names
from gpuguard.model import settings as settings_model
from gpuguard.sim import live, prometheus_api, prometheus_view, return_view, world
from gpuguard.sources import (
    fleet_health,
    gpu_metrics,
    gpu_pods,
    node_scope,
    prometheus,
    return_facts,
)

Family = Callable[[datetime], tuple[fleet.MetricSample, ...]]
NodesFamily = Callable[[frozenset[str], datetime], tuple[fleet.MetricSample, ...]]  # of nodes
NodePlan = tuple[Callable[[tuple[str, ...]], Mapping[str, str]], NodesFamily]
_FRESHNESS = {  # the freshness queries' names -> the metric whose newest sample they time
    names.FRESHNESS_KSM: names.KSM_NODE_CAPACITY,
    names.FRESHNESS_DCGM: names.DCGM_GPU_UTIL,
}


@dataclass
class EmulatedPrometheus:
    """``prometheus_api.Answers`` over a live world; ``lock`` is held while the world moves."""

    played: world.World
    view: prometheus_view.WorldPrometheus
    routes: dict[str, tuple[Family, str]]
    speed: float
    lock: threading.Lock
    # plans asked of some nodes (their queries for those nodes) and the family answering them
    node_plans: Sequence[NodePlan] = ()

    def now(self) -> datetime:
        return datetime.now(UTC)

    def instant(self, query: str, at: datetime) -> list[prometheus_api.Sample]:
        fleet_wide = self.routes.get(query)
        routes = [fleet_wide] if fleet_wide else self._scoped_routes(query)
        if not routes:
            raise prometheus_api.QueryRefused(
                f"the simulator answers only gpuguard's own queries with the settings "
                f"'gpuguard sim serve' was given (install prometheus for any PromQL); "
                f"not this one: {query!r:.120}"
            )
        # One text, one answer: where two plans send the same text (the GPU plan's last
        # utilisation and the return facts' exporter series, of the same nodes), the first
        # emulation that has its series answers (the GPU windows know only some nodes).
        for family, name in routes:
            answer = self._answer(query, family, name, at)
            if answer:
                return answer
        return []

    def _answer(
        self, query: str, family: Family, name: str, at: datetime
    ) -> list[prometheus_api.Sample]:
        with self.lock:
            scenario_at = self._scenario_time(at)
            if name in _FRESHNESS:
                return self._freshness(scenario_at, _FRESHNESS[name])
            try:
                samples = family(scenario_at)
            except SourceError:
                return []  # stale: the freshness queries say so, as Prometheus' would
        stamped = "timestamp(" in query
        return [(s.labels, self._wall(s.value) if stamped else s.value)
                for s in samples if s.name == name]

    def _scoped_routes(self, query: str) -> list[tuple[Family, str]]:
        """A return-facts, GPU-pods or phantom query scoped to some nodes by a node label
        matcher: the fleet-wide query's answer, of those nodes only (what Prometheus answers
        to the matcher); every plan's route that sends this text, in order."""
        nodes = node_scope.scope_of(query)
        if nodes is None:
            return []
        asked = frozenset(nodes)
        if query == gpu_pods.GpuPodsPlan(nodes).queries()[names.DCGM_GPU_PODS]:
            return [(partial(_of_nodes, self.view.pods_on_clean_gpus, asked),
                     names.DCGM_GPU_PODS)]
        routes: list[tuple[Family, str]] = [
            (partial(family_of, asked), name)
            for queries_of, family_of in self.node_plans
            for name, text in queries_of(nodes).items()
            if text == query
        ]
        scoped = return_facts.ReturnFactsPlan(nodes=nodes).queries()
        fleet_wide = return_facts.ReturnFactsPlan().queries()
        name = next((n for n, text in scoped.items() if text == query), None)
        wide = None if name is None else self.routes.get(fleet_wide[name])
        if wide is not None:
            family, routed = wide
            routes.append((partial(_of_nodes, family, asked), routed))
        return routes

    def _freshness(self, at: datetime, metric: str) -> list[prometheus_api.Sample]:
        """``max(timestamp(m))``: the newest scrape that found ``metric``."""
        newest = self.view.newest_scrape(at, metric)
        return [] if newest is None else [({}, self._wall(newest.timestamp()))]

    def _scenario_time(self, at: datetime) -> datetime:
        origin = self.played.origin
        return min(origin + (at - origin) * self.speed, self.played.now)

    def _wall(self, scenario_seconds: float) -> float:
        origin = self.played.origin.timestamp()
        return origin + (scenario_seconds - origin) / self.speed


def _of_nodes(
    family: Family, nodes: frozenset[str], at: datetime
) -> tuple[fleet.MetricSample, ...]:
    return tuple(s for s in family(at) if series.node_of(s.labels) in nodes)


def _topology_changes(
    now: Sequence[fleet.MetricSample], then: Sequence[fleet.MetricSample], at: datetime
) -> tuple[fleet.MetricSample, ...]:
    """``TopologyChangesPlan``'s answer: per node, its topology series at only one of the
    two instants (PromQL's ``unless`` both ways)."""

    def keyed(samples: Sequence[fleet.MetricSample]) -> set[tuple[str, frozenset[tuple[str, str]]]]:
        return {(s.name, frozenset(s.labels.items())) for s in samples
                if s.name in (names.GPU_NVLINK_PEER, names.GPU_NUMA_NODE)}  # fmt: skip

    counts = collections.Counter(
        dict(labels).get("node", "") for _, labels in keyed(now) ^ keyed(then)
    )
    return tuple(
        fleet.MetricSample(names.GPU_TOPOLOGY_CHANGES, {"node": node}, float(count), at)
        for node, count in sorted(counts.items())
    )


def answers(
    played: world.World,
    settings: settings_model.GuardSettings,
    speed: float,
    lock: threading.Lock,
) -> tuple[EmulatedPrometheus, prometheus_view.WorldPrometheus]:
    """The answers for ``played``, and the emulation to scrape whenever the world changed."""
    iso, phantom = settings.isolation, settings.phantom
    view = prometheus_view.WorldPrometheus(played, iso.hold_window, iso.xid_lookback)
    facts = return_view.WorldReturnFacts(played)
    gpu_plan = gpu_metrics.GpuQueryPlan.for_settings(phantom)
    gpu_windows = partial(findings.gpu_plan_samples, view, plan=gpu_plan)

    def gpu_windows_of(nodes: frozenset[str], at: datetime) -> tuple[fleet.MetricSample, ...]:
        return findings.gpu_plan_samples(view, at, gpu_plan, nodes)

    health = fleet_health.HealthQueryPlan.for_settings(settings.fleet)

    def health_samples(at: datetime) -> tuple[fleet.MetricSample, ...]:
        return findings.plan_samples(played, at, health)

    changes = fleet_health.TopologyChangesPlan()

    def topology_changes(at: datetime) -> tuple[fleet.MetricSample, ...]:
        return _topology_changes(health_samples(at), health_samples(at - changes.since), at)

    plans: list[tuple[dict[str, str], Family]] = [
        (prometheus.QueryPlan(iso.hold_window, iso.xid_lookback).queries(), view.samples),
        (return_facts.ReturnFactsPlan().queries(), facts.samples),
        (gpu_plan.queries(), gpu_windows),
        (health.queries(), health_samples),
        (changes.queries(), topology_changes),
    ]
    routes: dict[str, tuple[Family, str]] = {}
    for queries, family in plans:
        for name, query in queries.items():
            routes.setdefault(query, (family, name))
    node_plans: list[NodePlan] = [
        (gpu_plan.node_queries, gpu_windows_of),
        (lambda nodes: fleet_health.TopologyPlan(nodes).queries(),
         partial(_of_nodes, health_samples)),
    ]  # fmt: skip
    return EmulatedPrometheus(played, view, routes, speed, lock, node_plans), view



def answers_for(settings: settings_model.GuardSettings, speed: float) -> live.Emulation:
    """``sim.live.Emulation`` for ``gpuguard sim serve`` with these settings."""

    def emulation(
        played: world.World, lock: threading.Lock
    ) -> tuple[EmulatedPrometheus, prometheus_view.WorldPrometheus]:
        return answers(played, settings, speed, lock)

    return emulation
