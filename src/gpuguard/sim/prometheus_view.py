"""What the world's Prometheus would answer to the guard's queries, without running one.

``gpuguard demo`` must run on a laptop with nothing installed, over days of simulated time,
so it cannot scrape a real Prometheus. This view records the series the guard reads —
dcgm-exporter's XID gauge (and the optional count), kube-state-metrics' GPU capacity and
allocatable — as change points at 15 s scrape boundaries, and answers the guard's named
series (``model.metric_names``) at an instant with Prometheus' semantics for those shapes:
instant value with staleness, ``offset``, ``min_over_time`` over a subquery, ``max_over_time``.
It implements ``model.ports.MetricsSource``. It also records each GPU's telemetry
(``metric_names.GPU_TELEMETRY``) and answers the GPU window plan of ``sources.gpu_metrics``
(``gpu_window_samples``) for the demo's phantom findings. The same scenarios run against a
real Prometheus in the integration tests; this view is the world's, never the guard's, logic.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gpuguard.errors import SourceError
from gpuguard.model import fleet, subquery
from gpuguard.model import metric_names as names
from gpuguard.model import series as series_labels
from gpuguard.sim import exporters, exposition, state, world

SCRAPE = timedelta(seconds=15)
_GPU = "nvidia.com/gpu"

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]
Target = Callable[[], Iterable[tuple[str, Mapping[str, str], float]]]


@dataclass
class _Series:
    """Change points of one series: (time, value or None when absent)."""

    times: list[datetime] = field(default_factory=list)
    values: list[float | None] = field(default_factory=list)

    def record(self, at: datetime, value: float | None) -> None:
        if self.values and self.values[-1] == value:
            return
        self.times.append(at)
        self.values.append(value)

    def at(self, when: datetime) -> float | None:
        i = bisect.bisect_right(self.times, when) - 1
        return self.values[i] if i >= 0 else None



_RANGES_KEPT = 64  # (start, end) ranges of scrape instants kept between scrapes

@dataclass
class WorldPrometheus:
    """Scrapes a World on request and answers the guard's plan at an instant."""

    world: world.World
    hold_window: timedelta
    xid_lookback: timedelta
    step: timedelta = timedelta(seconds=30)
    _series: dict[SeriesKey, _Series] = field(default_factory=dict)
    _first_scrape: datetime | None = None
    _down: list[tuple[datetime, datetime | None]] = field(default_factory=list)
    _gpu_series: dict[SeriesKey, _Series] = field(default_factory=dict)
    _families: dict[str, list[exposition.Family]] = field(default_factory=dict)  # this scrape's
    targets: list[Target] = field(default_factory=list)
    """Other scrape targets (the demo's node agents): each returns its samples when scraped."""
    left_open: bool = True
    """Subquery ranges as Prometheus 3.x evaluates them, (t - range, t]; False: 2.x's
    [t - range, t] (``model.subquery``)."""
    _scrape_count: int = 0  # what the recorded series answer changes only when this grows
    _answered: tuple[tuple[datetime, int], tuple[fleet.MetricSample, ...]] | None = None
    _scrape_ranges: dict[tuple[datetime, datetime, int], tuple[datetime, ...]] = field(
        default_factory=dict
    )

    def scrape(self, *, found_after: timedelta = timedelta(0)) -> None:
        """Record the world as a scrape finds it, stamped at the scrape: now, as Prometheus
        stamps a scrape with its start, or ``found_after`` from now (the demo's scrape comes
        one interval after a change, the slowest phase a live scrape can have).

        Call it whenever the world changed; between calls every series keeps its value, as
        the scrapes in between would have found it.
        """
        self._scrape_count += 1
        self._track_outage(self.world.now)
        if not self.world.prometheus_up:
            return
        now = self.world.now + found_after
        self._families = {}
        if self._first_scrape is None:
            self._first_scrape = now
        seen: set[SeriesKey] = set()
        for node in self.world.nodes:
            seen |= self._scrape_node(node, now)
        for target in self.targets:
            seen |= {self._put(name, labels, value, now) for name, labels, value in target()}
        seen |= {self._put(name, labels, value, now)
                 for name, labels, value in self.world.memory.forged}  # tenants' pods
        for key, series in self._series.items():
            if key not in seen:
                series.record(now, None)
        self._scrape_telemetry(now)

    def _track_outage(self, now: datetime) -> None:
        down = not self.world.prometheus_up
        if down and (not self._down or self._down[-1][1] is not None):
            self._down.append((now, None))
        elif not down and self._down and self._down[-1][1] is None:
            self._down[-1] = (self._down[-1][0], now)

    def _put(self, name: str, labels: Mapping[str, str], value: float, now: datetime) -> SeriesKey:
        key = (name, tuple(sorted(labels.items())))
        self._series.setdefault(key, _Series()).record(now, value)
        return key

    def _scrape_node(self, node: state.SimNode, now: datetime) -> set[SeriesKey]:
        seen = {
            self._put(names.KSM_NODE_CAPACITY, {"node": node.name}, node.gpu_capacity, now),
            self._put(
                names.KSM_NODE_ALLOCATABLE,
                {"node": node.name},
                node.gpu_allocatable_at(now),
                now,
            ),
        }
        if node.down_until is not None or not exporters.exporter_up(node, self.world.now):
            return seen  # the exporter pod is down with its node, or does not answer
        for family in self._dcgm(node, now):
            if family.name in _GUARD_FAMILIES:
                seen |= {self._put(family.name, dict(s.labels), s.value, now)
                         for s in family.samples}  # fmt: skip
        return seen

    def _dcgm(self, node: state.SimNode, now: datetime) -> list[exposition.Family]:
        """dcgm-exporter's families as its scrape at ``now`` reads them (the labels and the
        Xid rules of ``sim.dcgm``, pod mapping included), computed once per scrape."""
        if node.name not in self._families:
            pods = exporters.pods_by_gpu(node, self.world.store, now)
            families = exporters.dcgm_families(
                node, pods, now, xid_count_metric=node.xid_count_metric
            )
            self._families[node.name] = list(families)
        return self._families[node.name]

    def _scrape_telemetry(self, now: datetime) -> None:
        """Every GPU's busy/idle fields with dcgm-exporter's labels (pod mapping included),
        and the GPUs each node's running workloads hold (kube-state-metrics' active pods)."""
        seen: set[SeriesKey] = set()
        for node in self.world.nodes:
            held = sum(len(w.gpus) for w in exporters.active_workloads(node, now))
            seen.add(self._put_gpu(names.NODE_GPU_PODS_MAX, (("node", node.name),), held, now))
            if not exporters.exporter_up(node, now):
                continue
            for family in self._dcgm(node, now):
                if family.name in _TELEMETRY:
                    seen |= {self._put_gpu(family.name, s.labels, s.value, now)
                             for s in family.samples}  # fmt: skip
        for key, series in self._gpu_series.items():
            if key not in seen:
                series.record(now, None)

    def _put_gpu(
        self, name: str, labels: tuple[tuple[str, str], ...], value: float, now: datetime
    ) -> SeriesKey:
        key = (name, tuple(sorted(labels)))
        self._gpu_series.setdefault(key, _Series()).record(now, value)
        return key

    def gpu_window_samples(
        self,
        at: datetime,
        window: timedelta,
        *,
        signature_lookback: timedelta,
        util_min_pct: float,
        fb_used_max_mib: float,
        sm_active_min: float = 0.0,
        scoped: bool = False,
        nodes: frozenset[str] | None = None,
    ) -> tuple[fleet.MetricSample, ...]:
        """The named samples of ``sources.gpu_metrics.GpuQueryPlan`` at ``at``: min/max/avg
        over the window's scrapes and the last value of each GPU field, the GPUs seen at the
        window's start, the node GPU pods held in the window and the phantom signature's
        minutes in the lookback. ``scoped``: the plan's candidate nodes (a series without a
        pod busy over the window), and the per-GPU samples of those nodes only. ``nodes``: the
        answer to the plan's queries scoped to those nodes (``GpuQueryPlan.node_queries``), each
        series outside them skipped, not computed and dropped: the window over every GPU of the
        fleet is most of a tick's cost in the simulator."""
        scrapes = self._scrapes(at, window)
        if not scrapes:
            return ()
        out: list[fleet.MetricSample] = []
        gpu_series = _of_nodes(self._gpu_series, nodes)
        candidates = self._candidates(gpu_series, scrapes, at, util_min_pct, sm_active_min)
        if scoped:
            out += candidates.values()
        for (metric, labels), series in gpu_series.items():
            if metric == names.NODE_GPU_PODS_MAX:
                out += self._pods_max(series, dict(labels), at, window)
                continue
            if scoped and series_labels.node_of(dict(labels)) not in candidates:
                continue
            values = [v for t in scrapes if (v := series.at(t)) is not None]
            out += _window_stats(metric, dict(labels), values, series.at(scrapes[-1]), at)
            seen = self._value_at(series, at - window)  # ``util offset <window>``
            if seen is not None and metric == names.DCGM_GPU_UTIL:
                name = names.GPU_SEEN_AT_WINDOW_START
                out.append(fleet.MetricSample(name, dict(labels), seen, at))
        signature = (signature_lookback, util_min_pct, fb_used_max_mib)
        return tuple(out + self._signature_minutes(gpu_series, at, *signature))

    def _candidates(
        self, gpu_series: Mapping[SeriesKey, _Series], scrapes: list[datetime], at: datetime,
        util_min: float, active_min: float,
    ) -> dict[str, fleet.MetricSample]:  # fmt: skip
        """Node -> its ``PHANTOM_CANDIDATE_NODES`` sample: a util series without a pod at or
        over ``util_min`` at every scrape of the window, or an SM or graphics engine activity
        series over ``active_min``; labelled with the node label(s) its series carry."""
        busy = {names.DCGM_GPU_UTIL: lambda v: v >= util_min,
                names.DCGM_SM_ACTIVE: lambda v: v > active_min,
                names.DCGM_GR_ENGINE_ACTIVE: lambda v: v > active_min}  # fmt: skip
        out: dict[str, fleet.MetricSample] = {}
        for (metric, labels), series in gpu_series.items():
            test, found = busy.get(metric), dict(labels)
            node = series_labels.node_of(found)
            if test is None or found.get("pod") or node is None:
                continue
            values = [v for t in scrapes if (v := series.at(t)) is not None]
            if values and test(min(values)):
                keys = {k: v for k, v in found.items() if k in series_labels.NODE_LABELS}
                out[node] = fleet.MetricSample(names.PHANTOM_CANDIDATE_NODES, keys, 1.0, at)
        return out

    def _pods_max(
        self, series: _Series, labels: dict[str, str], at: datetime, window: timedelta
    ) -> list[fleet.MetricSample]:
        """``max_over_time((<GPU pods per node>)[window:30s])`` (``sources.gpu_metrics``)."""
        steps = _subquery_steps(at, subquery.subquery_range(window), self.step, self.left_open)
        values = [v for t in steps if (v := self._value_at(series, t)) is not None]
        name = names.NODE_GPU_PODS_MAX
        return [fleet.MetricSample(name, labels, max(values), at)] if values else []

    def _value_at(self, series: _Series, when: datetime) -> float | None:
        """An instant selector's value at ``when``: the last scrape within the 5 min lookback."""
        scraped = self._last_scrape(when)
        if scraped is None or when - scraped > timedelta(minutes=5):
            return None
        return series.at(scraped)

    def _scrapes(self, at: datetime, window: timedelta) -> list[datetime]:
        """Scrape instants in a range selector ``[window]`` at ``at`` with Prometheus up,
        oldest first: those in [at - window, at] (the range ``model.subquery`` gives it)."""
        last = self._last_scrape(at)
        out = []
        t = last
        while t is not None and t > at - subquery.subquery_range(window):
            if not self._down_at(t):
                out.append(t)
            t -= SCRAPE
        return out[::-1]

    def _signature_minutes(
        self, gpu_series: Mapping[SeriesKey, _Series], at: datetime, lookback: timedelta,
        util_min: float, fb_max: float,
    ) -> list[fleet.MetricSample]:  # fmt: skip
        range_ = subquery.subquery_range(lookback)
        steps = _subquery_steps(at, range_, timedelta(minutes=1), self.left_open)
        out = []
        for (metric, labels), util in gpu_series.items():
            if metric != names.DCGM_GPU_UTIL or dict(labels).get("pod"):
                continue
            fb = gpu_series.get((names.DCGM_FB_USED, labels))
            if fb is None:
                continue
            count = sum(1 for t in steps if _holds(util.at(t), fb.at(t), util_min, fb_max))
            if count:
                name = names.PHANTOM_SIGNATURE_MINUTES
                out.append(fleet.MetricSample(name, dict(labels), count, at))
        return out

    # ---- answering ---------------------------------------------------------------------------

    def samples(self, at: datetime) -> tuple[fleet.MetricSample, ...]:
        """The whole plan's series at ``at``. The guard's tick asks the plan's queries one by
        one at one instant and each is answered from this, so the answer is kept until the
        instant or the recorded series change (a scrape): the same, at a tenth of the cost."""
        if self._answered is not None and self._answered[0] == (at, self._scrape_count):
            return self._answered[1]
        answer = self._plan_samples(at)
        self._answered = ((at, self._scrape_count), answer)
        return answer

    def _plan_samples(self, at: datetime) -> tuple[fleet.MetricSample, ...]:
        if self._down_at(at):
            raise SourceError(f"Prometheus is down at {at.isoformat()} (simulated outage)")
        out = self._instant(names.DCGM_XID_LAST, names.DCGM_XID_LAST, at, at, _positive)
        day_ago = at - self.xid_lookback
        out += self._instant(names.DCGM_XID_LAST, names.XID_LAST_24H_AGO, day_ago, at, _positive)
        out += self._count_recent(at)
        out += self._loss_held(at)
        out += self._node_newest(at, names.DCGM_GPU_UTIL, ("Hostname", "hostname"),
                                 names.DCGM_NODE_NEWEST)
        out += self._node_newest(at, names.AGENT_KERNEL_LINES_TOTAL, ("node",),
                                 names.AGENT_NODE_NEWEST)
        out += self._recent(names.XID_TOTAL, names.XID_TOTAL_RECENT, at)
        out += self._recent(names.FALLEN_OFF_BUS_TOTAL, names.FALLEN_OFF_BUS_RECENT, at)
        self._check_fresh(at)
        return tuple(out)

    def _recent(self, counter: str, name: str, at: datetime) -> list[fleet.MetricSample]:
        """``((c unless last_over_time(c[R] offset look)) + 0) or (increase(c[R]) > 0)`` with
        ``R`` the lookback plus half a second (sources.prometheus): the counter's value if it
        was born inside the Xid lookback, else its growth there as Prometheus extrapolates it."""
        scraped = self._last_scrape(at)
        if scraped is None or at - scraped > timedelta(minutes=5):
            return []
        end = datetime.fromtimestamp(subquery.evaluation_time(at), at.tzinfo)
        start = end - subquery.subquery_range(self.xid_lookback)
        out = []
        for (metric_name, labels), series in self._series.items():
            now_value = series.at(scraped) if metric_name == counter else None
            if now_value is None:
                continue
            if not self._present(series, start - self.xid_lookback, end - self.xid_lookback):
                out.append(fleet.MetricSample(name, dict(labels), now_value, at))
            elif (grown := self._increase(series, start, end)) is not None and grown > 0:
                out.append(fleet.MetricSample(name, dict(labels), grown, at))
        return out

    def _increase(self, series: _Series, start: datetime, end: datetime) -> float | None:
        """``increase()`` over the scrapes in (start, end]; a series with no recorded change
        there grew by 0 (or has no answer, which the caller reads alike)."""
        lo = bisect.bisect_right(series.times, start)
        if lo == len(series.times) or series.times[lo] > end:
            return None
        points = [
            (t, v) for t in self._scrape_times(start, end) if (v := series.at(t)) is not None
        ]
        return extrapolated_increase(points, start, end)

    def _present(self, series: _Series, start: datetime, end: datetime) -> bool:
        """``last_over_time(c[end - start])`` at ``end`` has an answer: a scrape in (start, end]
        found the series."""
        return any(series.at(t) is not None for t in reversed(self._scrape_times(start, end)))

    def _scrape_times(self, start: datetime, end: datetime) -> tuple[datetime, ...]:
        """The scrapes in (start, end], Prometheus up; kept per range until the next scrape
        (a query asks it once per series: a day of scrapes, 5,760 instants, each time)."""
        key = (start, end, self._scrape_count)
        if (known := self._scrape_ranges.get(key)) is None:
            if len(self._scrape_ranges) >= _RANGES_KEPT:
                self._scrape_ranges.clear()
            known = self._scrape_ranges[key] = tuple(self._scrape_times_in(start, end))
        return known

    def _scrape_times_in(self, start: datetime, end: datetime) -> list[datetime]:
        origin = self.world.origin
        t = origin + SCRAPE * math.floor((end - origin) / SCRAPE)
        # only the outages that overlap the range can drop one of its scrapes
        down = [(s, e) for s, e in self._down if s <= end and (e is None or e > start)]
        times = []
        while t > start and self._first_scrape is not None and t >= self._first_scrape:
            if not any(s <= t and (e is None or t < e) for s, e in down):
                times.append(t)
            t -= SCRAPE
        return times[::-1]

    def newest_scrape(self, at: datetime, metric: str) -> datetime | None:
        """``max(timestamp(metric))`` at ``at``: the last scrape that found the metric."""
        scraped = self._last_scrape(at)
        if scraped is None:
            return None
        found = any(name == metric and series.at(scraped) is not None
                    for (name, _), series in self._series.items())
        return scraped if found else None

    def _node_newest(
        self, at: datetime, metric: str, node_labels: tuple[str, ...], name: str
    ) -> list[fleet.MetricSample]:
        """``max by (<node label>) (timestamp(<metric>))``: per node, the last scrape if it
        found the metric's series there. A scrape that misses a series (or fails) writes a
        staleness marker, so the series is gone from then on, not read for 5 more minutes
        (https://prometheus.io/docs/prometheus/latest/querying/basics/#staleness)."""
        scraped = self._last_scrape(at)
        if scraped is None:
            return []
        newest: dict[tuple[str, str], datetime] = {}
        for (metric_name, labels), series in self._series.items():
            host = next(((k, v) for k, v in labels if k in node_labels), None)
            if metric_name != metric or host is None:
                continue
            if series.at(scraped) is not None and at - scraped <= timedelta(minutes=5):
                newest[host] = scraped
        return [
            fleet.MetricSample(name, {key: node}, when.timestamp(), at)
            for (key, node), when in newest.items()
        ]

    def _down_at(self, at: datetime) -> bool:
        return any(start <= at and (end is None or at < end) for start, end in self._down)

    def _last_scrape(self, at: datetime) -> datetime | None:
        """The last scrape boundary at or before ``at`` with Prometheus up, if any: during an
        outage, the last one before it (an instant selector looks back to it, 5 min at most)."""
        origin = self.world.origin
        boundary = origin + SCRAPE * math.floor((at - origin) / SCRAPE)
        while self._first_scrape is not None and boundary >= self._first_scrape:
            if not self._down_at(boundary):
                return boundary
            boundary -= SCRAPE
        return None

    def _instant(
        self, metric: str, name: str, when: datetime, stamp: datetime,
        keep: Callable[[float], bool] = lambda _: True,
    ) -> list[fleet.MetricSample]:  # fmt: skip
        """``metric`` at ``when`` (``offset``), the series whose value ``keep`` keeps (a
        comparison such as ``> 0`` filters series, ``docs/querying/operators``)."""
        scraped = self._last_scrape(when)
        if scraped is None or when - scraped > timedelta(minutes=5):
            return []
        return [
            fleet.MetricSample(name, dict(labels), value, stamp)
            for (metric_name, labels), series in self._series.items()
            if metric_name == metric and (value := series.at(scraped)) is not None and keep(value)
        ]

    def samples_of(self, at: datetime, nodes: Sequence[str]) -> tuple[fleet.MetricSample, ...]:
        """The pods on the clean GPUs of ``nodes`` (``sources.gpu_pods``' scoped query), as
        Prometheus answers it: a query's freshness checked, of those nodes only."""
        if self._down_at(at):
            raise SourceError(f"Prometheus is down at {at.isoformat()} (simulated outage)")
        asked = frozenset(nodes)
        out = [s for s in self.pods_on_clean_gpus(at) if series_labels.node_of(s.labels) in asked]
        self._check_fresh(at)
        return tuple(out)

    def pods_on_clean_gpus(self, at: datetime) -> tuple[fleet.MetricSample, ...]:
        """``group by (<POD_LABELS>) (DCGM_FI_DEV_XID_ERRORS{pod!=""} <= 0)``: 1 per distinct
        set of those labels; a label a series lacks (or has empty) is absent from its group."""
        groups = {
            tuple((k, v) for k, v in s.labels.items() if k in _POD_LABELS and v)
            for s in self._instant(names.DCGM_XID_LAST, names.DCGM_GPU_PODS, at, at,
                                   lambda value: value <= 0)
            if s.labels.get("pod")
        }  # fmt: skip
        return tuple(fleet.MetricSample(names.DCGM_GPU_PODS, dict(g), 1.0, at) for g in groups)

    def _count_recent(self, at: datetime) -> list[fleet.MetricSample]:
        out = []
        for (metric_name, labels), series in self._series.items():
            if metric_name != names.DCGM_XID_COUNT:
                continue
            peak = max(
                (v for t, v in zip(series.times, series.values, strict=True)
                 if v is not None and at - subquery.subquery_range(self.xid_lookback) < t <= at),
                default=None,
            )
            if peak:
                out.append(fleet.MetricSample(names.XID_COUNT_RECENT, dict(labels), peak, at))
        return out

    def _loss_held(self, at: datetime) -> list[fleet.MetricSample]:
        range_ = subquery.subquery_range(self.hold_window)
        steps = _subquery_steps(at, range_, self.step, self.left_open)
        out = []
        for node in self.world.nodes:
            losses = [self._loss(node.name, t) for t in steps]
            known = [v for v in losses if v is not None]
            if known and min(known) > 0:  # ``min_over_time(...) > 0``
                labels = {"node": node.name}
                out.append(fleet.MetricSample(names.GPU_LOSS_HELD, labels, min(known), at))
        return out

    def _loss(self, node: str, when: datetime) -> float | None:
        labels = (("node", node),)
        capacity = self._series.get((names.KSM_NODE_CAPACITY, labels))
        allocatable = self._series.get((names.KSM_NODE_ALLOCATABLE, labels))
        if capacity is None or allocatable is None:
            return None
        cap, alloc = self._value_at(capacity, when), self._value_at(allocatable, when)
        return None if cap is None or alloc is None else cap - alloc

    def _check_fresh(self, at: datetime) -> None:
        scraped = self._last_scrape(at)
        if scraped is None or at - scraped > timedelta(minutes=2):
            raise SourceError(f"{names.FRESHNESS_KSM}: no recent scrape before {at.isoformat()}")
        util = [
            s for (metric_name, _), s in self._series.items()
            if metric_name == names.DCGM_GPU_UTIL and s.at(scraped) is not None
        ]
        if not util:
            raise SourceError(f"Prometheus has no series for {names.FRESHNESS_DCGM!r}")


def _subquery_steps(
    at: datetime, range_: timedelta, step: timedelta, left_open: bool
) -> list[datetime]:
    """The instants Prometheus evaluates ``expr[range_:step]`` at for a query at ``at``: the
    multiples of ``step`` since the epoch in (at - range_, at] — in [at - range_, at] on
    Prometheus 2.x (``left_open=False``; ``model.subquery``)."""
    seconds = step.total_seconds()
    t = datetime.fromtimestamp(math.floor(at.timestamp() / seconds) * seconds, at.tzinfo)
    start = at - range_
    steps = []
    while t > start or (t == start and not left_open):
        steps.append(t)
        t -= step
    return steps


_TELEMETRY = frozenset(names.GPU_TELEMETRY)
_POD_LABELS = frozenset(series_labels.POD_LABELS)
_GUARD_FAMILIES = frozenset({names.DCGM_GPU_UTIL, names.DCGM_XID_LAST, names.DCGM_XID_COUNT})


def _window_stats(
    metric: str, labels: dict[str, str], values: list[float], last: float | None, at: datetime
) -> list[fleet.MetricSample]:
    if not values:
        return []
    stats = {"min": min(values), "max": max(values), "avg": sum(values) / len(values)}
    if last is not None:
        stats["last"] = last
    return [
        fleet.MetricSample(names.window_stat(metric, stat), labels, value, at)
        for stat, value in stats.items()
    ]


def _positive(value: float) -> bool:
    return value > 0


def _holds(util: float | None, fb: float | None, util_min: float, fb_max: float) -> bool:
    return util is not None and fb is not None and util >= util_min and fb < fb_max


def extrapolated_increase(
    points: list[tuple[datetime, float]], start: datetime, end: datetime
) -> float | None:
    """``increase()`` of a counter's samples in a range as Prometheus computes it
    (promql/functions.go ``extrapolatedRate``, the same in 2.x and 3.x): the growth between the
    first and last sample, resets added back, extrapolated towards the range's ends — by the
    whole gap when it is under 1.1 average sample intervals, else by half an interval, and
    never back past the counter's zero. Fewer than two samples: no answer."""
    if len(points) < 2:
        return None
    values = [v for _, v in points]
    grown = values[-1] - values[0] + sum(
        before for before, after in itertools.pairwise(values) if after < before
    )
    sampled = (points[-1][0] - points[0][0]).total_seconds()
    average = sampled / (len(points) - 1)
    to_start = (points[0][0] - start).total_seconds()
    to_end = (end - points[-1][0]).total_seconds()
    if grown > 0 and values[0] >= 0:
        to_start = min(to_start, sampled * values[0] / grown)
    threshold = average * 1.1
    interval = sampled
    interval += to_start if to_start < threshold else average / 2
    interval += to_end if to_end < threshold else average / 2
    return grown * interval / sampled


def _of_nodes(
    all_series: dict[SeriesKey, _Series], nodes: frozenset[str] | None
) -> Mapping[SeriesKey, _Series]:
    """The series of ``nodes`` (all of them when None)."""
    if nodes is None:
        return all_series
    return {key: s for key, s in all_series.items() if series_labels.node_of(dict(key[1])) in nodes}
