"""The guard's own metrics and its /metrics + /healthz endpoint (``gpuguard.metrics_http``, shared
with the agent).

A registry per guard (no global registry, nothing at import time). Names come from
``model.metric_names``; prometheus-client adds ``_total`` to counters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuguard import metrics_http
from gpuguard.controller import tick
from gpuguard.model import annotation_keys
from gpuguard.model import metric_names as names
from gpuguard.policy import isolate
from gpuguard.sources import watch_cache

_STEP_OF_KIND = {"source": "collect", "write": "isolate"}


def _counter_base(name: str) -> str:
    return name.removesuffix("_total")


class GuardMetrics:
    """Ticks, decisions by reason, breaker state, isolated nodes, last successful tick."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.ticks = Counter(_counter_base(names.TICKS_TOTAL), "Guard ticks run.", registry=r)
        self.tick_errors = Counter(
            _counter_base(names.TICK_ERRORS_TOTAL),
            "Tick failures by kind (source, write, internal) and the step that failed closed.",
            ["kind", "step"],
            registry=r,
        )
        self.last_success = Gauge(
            names.LAST_SUCCESSFUL_TICK, "Unix time of the last tick that decided.", registry=r
        )
        self.decisions = Counter(
            _counter_base(names.DECISIONS_TOTAL),
            "Actions and findings by kind and reason.",
            ["action", "reason"],
            registry=r,
        )
        self.breaker_open = Gauge(
            names.BREAKER_OPEN, "1 while the breaker admits no new isolation.", registry=r
        )
        self.breaker_tripped = Gauge(
            names.BREAKER_TRIPPED, "1 while the breaker is tripped (burst).", registry=r
        )
        self.breaker_limit = Gauge(
            names.BREAKER_LIMIT, "The breaker's limits for this fleet.", ["limit"], registry=r
        )
        self.breaker_unconfirmed = Gauge(
            names.BREAKER_UNCONFIRMED,
            "Unconfirmed isolations: started in the window (recent), or out (all).",
            ["scope"],
            registry=r,
        )
        self.withheld = Gauge(
            names.FAULT_WITHHELD,
            "1 per node with a fault the breaker withheld, by the limit that withheld it.",
            ["node", "reason"],
            registry=r,
        )
        self.auto_isolated = Gauge(
            "gpuguard_auto_isolated_nodes", "Nodes gpuguard holds cordoned.", registry=r
        )
        self.isolated = Gauge(
            names.ISOLATED_NODES, "1 per node gpuguard isolated, by reason.", ["node", "reason"],
            registry=r,
        )
        self.leader = Gauge("gpuguard_leader", "1 while this replica leads.", registry=r)
        self.writes_skipped = Counter(
            _counter_base(names.WRITES_SKIPPED_TOTAL),
            "Writes a tick skipped because leadership lapsed during it.",
            registry=r,
        )
        self.urgent_wakes = Counter(
            _counter_base(names.URGENT_WAKES_TOTAL),
            "Nodes newly carrying an unambiguous GPU hardware fault condition (a wake).",
            registry=r,
        )
        self.urgent_ticks = Counter(
            _counter_base(names.URGENT_TICKS_TOTAL),
            "Ticks run at once for wakes (several wakes before a tick are one).",
            registry=r,
        )
        self.urgent_rewakes = Counter(
            _counter_base(names.URGENT_REWAKES_TOTAL),
            "Ticks run again at once for fast-path faults the per-tick limit left.",
            registry=r,
        )
        self.phantom = Gauge(
            names.PHANTOM_GPUS,
            "Watts wasted by a GPU busy with nothing (phantom utilization), per GPU.",
            ["node", "gpu"],
            registry=r,
        )
        self.gpu_isolated = Gauge(
            names.GPU_ISOLATED,
            "Unix time each GPU gpuguard holds out on a serving node was isolated.",
            ["node", "gpu", "uuid"],
            registry=r,
        )
        self.gpu_overdue = Gauge(
            names.GPU_ISOLATION_OVERDUE,
            "1 per isolated card waiting longer than gpu_isolation.rma_deadline.",
            ["node", "gpu", "uuid"],
            registry=r,
        )
        self.returned = Counter(
            _counter_base(names.RETURNED_TOTAL), "Nodes returned to the pool after a burn-in.",
            ["node"], registry=r,
        )
        self.remediations = Counter(
            _counter_base(names.REMEDIATIONS_TOTAL),
            "gpuguard's own repairs (power cycle, GPU reset, hand-off) by result "
            "(docs/remediation.md).",
            ["action", "result"], registry=r,
        )  # fmt: skip
        self.change_nodes = Gauge(
            names.CHANGE_NODES,
            "Nodes of each declared change's pool by phase (pending: not taken yet).",
            ["change", "phase"],
            registry=r,
        )
        self.change_stopped = Gauge(
            names.CHANGE_STOPPED,
            "1 per stopped change rollout, with the node and the check that stopped it.",
            ["change", "node", "check"],
            registry=r,
        )
        self.return_checks = Gauge(
            names.RETURN_CHECK_STATUS,
            "1 for each return condition's current status, per isolated node.",
            ["node", "check", "status"],
            registry=r,
        )
        self.gang_gpu_hours = Gauge(
            names.GANG_GPU_HOURS_HELD,
            "GPU-hours held by a job while part of it is unschedulable (partial allocation).",
            ["namespace", "job", "system"],
            registry=r,
        )
        self.fleet_findings = Gauge(
            names.FLEET_FINDING,
            "1 per standing scheduling or interconnect finding (docs/fleet-health.md).",
            ["kind", "node", "gpu"],
            registry=r,
        )
        self.persistently_unhealthy = Gauge(
            names.NODE_PERSISTENTLY_UNHEALTHY,
            "1 per node that throttles or flaps over the persistence window.",
            ["node"],
            registry=r,
        )

    def watch_caches(
        self,
        states: Callable[[], Iterable[watch_cache.CacheState]],
        fallback_lists: Callable[[], int],
    ) -> None:
        """Export the watch caches' state, read at each scrape."""
        self.registry.register(_WatchCollector(states, fallback_lists))

    def observe(self, result: tick.TickResult) -> None:
        self.ticks.inc()
        if result.error_kind:
            step = _STEP_OF_KIND.get(result.error_kind, "tick")
            self.tick_errors.labels(result.error_kind, step).inc()
        for step, _ in result.step_errors:
            self.tick_errors.labels("internal", step).inc()
        self._observe_fleet_health(result)
        for mark in (o.result for o in result.remediations if o.result is not None):
            self.remediations.labels(str(mark.action), str(mark.result)).inc()
        if result.decision is None:
            return
        if result.error_kind is None:
            self.last_success.set(result.at.timestamp())
        self._observe_decision(result.decision)
        for finding in result.silent:
            self.decisions.labels("finding", str(finding.reason)).inc()
        self._observe_phantoms(result)
        self._observe_isolated(result)
        self._observe_gpus(result)
        self._observe_returns(result)
        self._observe_changes(result)

    def _observe_fleet_health(self, result: tick.TickResult) -> None:
        health = result.fleet_health
        if health is None:
            return
        for gauge in (self.gang_gpu_hours, self.fleet_findings, self.persistently_unhealthy):
            gauge.clear()
        for deadlock in health.gangs:
            job = deadlock.job
            self.gang_gpu_hours.labels(job.namespace, job.name, job.system).set(
                round(deadlock.gpu_hours, 2)
            )
        for finding in health.findings:
            self.fleet_findings.labels(finding.kind, finding.node, finding.gpu or "").set(1)
        for node in health.persistent:
            self.persistently_unhealthy.labels(node.node).set(1)

    def _observe_gpus(self, result: tick.TickResult) -> None:
        self.gpu_isolated.clear()
        self.gpu_overdue.clear()
        for node in result.snapshot.nodes if result.snapshot else ():
            for entry in node.marks.gpus:
                self.gpu_isolated.labels(node.name, entry.index, entry.uuid).set(
                    entry.at.timestamp()
                )
        for outcome in result.gpus:
            for entry in outcome.overdue:
                self.gpu_overdue.labels(outcome.node, entry.index, entry.uuid).set(1)

    def _observe_phantoms(self, result: tick.TickResult) -> None:
        if result.phantom is None:
            return
        self.phantom.clear()
        for gpu in result.phantom.phantoms:
            self.phantom.labels(gpu.node, gpu.gpu).set(round(gpu.wasted_w, 1))

    def _observe_decision(self, decision: isolate.IsolationDecision) -> None:
        for action in decision.actions:
            self.decisions.labels(str(action.kind), str(action.reason)).inc()
        for finding in decision.findings:
            self.decisions.labels("finding", str(finding.reason)).inc()
        state = decision.breaker
        self.breaker_open.set(1 if state.open else 0)
        self.breaker_tripped.set(1 if state.tripped else 0)
        for limit in ("rate", "level", "burst"):
            self.breaker_limit.labels(limit).set(getattr(state.limits, limit))
        self.breaker_unconfirmed.labels("recent").set(state.recent_unconfirmed)
        self.breaker_unconfirmed.labels("all").set(state.unconfirmed)
        self.auto_isolated.set(state.unconfirmed + state.confirmed_or_held)
        self.withheld.clear()
        for node, mark in decision.withheld.items():
            self.withheld.labels(node, str(mark.reason)).set(1)

    def set_leading(self, leading: bool) -> None:
        """A standby reports no fleet state: gauges only the leader sets are cleared when a
        replica stops leading, so a former leader never shows a stale breaker or isolation."""
        self.leader.set(1 if leading else 0)
        if leading:
            return
        for gauge in (self.breaker_open, self.breaker_tripped, self.auto_isolated):
            gauge.set(0)
        for labelled in (
            self.breaker_limit,
            self.breaker_unconfirmed,
            self.withheld,
            self.isolated,
            self.phantom,
            self.return_checks,
            self.gpu_isolated,
            self.gpu_overdue,
            self.gang_gpu_hours,
            self.fleet_findings,
            self.persistently_unhealthy,
            self.change_nodes,
            self.change_stopped,
        ):
            labelled.clear()

    def _observe_isolated(self, result: tick.TickResult) -> None:
        self.isolated.clear()
        nodes = result.snapshot.nodes if result.snapshot else ()
        for node in nodes:
            if isolate.is_auto_isolated(node):
                reason = "unknown" if node.marks.reason is None else node.marks.reason
                self.isolated.labels(node.name, reason).set(1)
        for action in result.applied:
            reason = action.annotations.get(annotation_keys.REASON, "unknown")
            self.isolated.labels(action.node, reason).set(1)

    def _observe_returns(self, result: tick.TickResult) -> None:
        self.return_checks.clear()
        for outcome in result.returns:
            decision = outcome.decision
            for check in decision.checks:
                self.return_checks.labels(decision.node, str(check.name), str(check.status)).set(1)
            if outcome.returned:
                self.returned.labels(decision.node).inc()

    def _observe_changes(self, result: tick.TickResult) -> None:
        """Each rollout's nodes per phase, and where a stopped one stopped (an alert's cue)."""
        self.change_nodes.clear()
        self.change_stopped.clear()
        for outcome in result.changes:
            if outcome.plan is None:
                continue
            for phase, count in outcome.plan.nodes.items():
                self.change_nodes.labels(outcome.name, phase).set(count)
            if outcome.plan.stopped_by is not None:
                node, check = outcome.plan.stopped_by
                self.change_stopped.labels(outcome.name, node, check).set(1)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


@contextmanager
def serve(
    metrics: GuardMetrics,
    healthy: Callable[[], bool],
    host: str = "0.0.0.0",
    port: int = 0,
    ready: Callable[[], bool] | None = None,
) -> Iterator[ThreadingHTTPServer]:
    """/metrics, /healthz (200 while ``healthy()``, else 503) and /readyz (``ready()``) in a
    background thread."""
    with metrics_http.serve(
        metrics.exposition, healthy, host=host, port=port, ready=ready
    ) as server:
        yield server


class _WatchCollector(Collector):
    """The watch caches' state as metrics, read when scraped (docs/design.md#fast-path)."""

    def __init__(
        self,
        states: Callable[[], Iterable[watch_cache.CacheState]],
        fallback_lists: Callable[[], int],
    ) -> None:
        self._states, self._fallback_lists = states, fallback_lists

    def collect(self) -> Iterable[Metric]:
        by_resource = ["resource"]
        synced = GaugeMetricFamily(
            names.WATCH_CACHE_SYNCED, "1 once the resource's cache was listed.", labels=by_resource
        )
        objects = GaugeMetricFamily(
            names.WATCH_CACHE_OBJECTS, "Objects in the cache.", labels=by_resource
        )
        relists = CounterMetricFamily(
            _counter_base(names.WATCH_RELISTS_TOTAL),
            "Full lists of a resource (the first one included).",
            labels=by_resource,
        )
        errors = CounterMetricFamily(
            _counter_base(names.WATCH_ERRORS_TOTAL),
            "Failed lists and broken watches of a resource.",
            labels=by_resource,
        )
        for state in self._states():
            synced.add_metric([state.resource], 1.0 if state.synced else 0.0)
            objects.add_metric([state.resource], state.objects)
            relists.add_metric([state.resource], state.relists)
            errors.add_metric([state.resource], state.watch_errors)
        fallback = CounterMetricFamily(
            _counter_base(names.WATCH_FALLBACK_LISTS_TOTAL),
            "Reads a tick listed afresh because a cache was not fresh.",
            value=self._fallback_lists(),
        )
        return [synced, objects, relists, errors, fallback]
