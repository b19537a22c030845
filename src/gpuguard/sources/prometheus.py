"""The guard's Prometheus reader: a fixed set of instant queries per tick, whatever the fleet
size, evaluated at one instant (``time=``), failing closed.

A non-success status, unparseable JSON, a missing expected series family (no
kube-state-metrics GPU capacity, no dcgm-exporter series at all) or data older than the
staleness bound raises ``SourceError`` — never "no targets", which would read as "all healthy".
So does an answer that is not what Prometheus promises (``docs/querying/api``): a partial one
(``warnings``, e.g. Thanos with a store down), a series without its label set (``"metric":
null``), a value that is NaN or infinite, or a timestamp outside 1970-2100.
Windows (the hold window, the Xid lookback) are evaluated by Prometheus, so a restarted guard
decides exactly as the one before it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import msgspec

from gpuguard.clients import prometheus as query
from gpuguard.errors import SourceError
from gpuguard.model import fleet, subquery
from gpuguard.model import metric_names as names

_GPU = f'resource="{names.GPU_RESOURCE_LABEL}"'
# Steps per range query of a history: a day at the 1-minute tick. Prometheus refuses more
# than 11,000 points per series, but a plan's subqueries over 10,000 steps outlast any sane
# prometheus.timeout; a day's chunk answers in a fraction of it, and the query count stays
# constant per chunk.
_CHUNK_STEPS = 1_440


class Plan(Protocol):
    """A fixed set of named instant queries; it must include ``freshness_queries()``."""

    def queries(self) -> dict[str, str]: ...


def freshness_queries() -> dict[str, str]:
    """The two queries every plan carries, so stale or missing data fails closed."""
    return {
        names.FRESHNESS_KSM: f"max(timestamp({names.KSM_NODE_CAPACITY}{{{_GPU}}}))",
        names.FRESHNESS_DCGM: f"max(timestamp({names.DCGM_GPU_UTIL}))",
    }


class FreshnessPlan:
    """Only the freshness queries: "does Prometheus answer with fresh data?" (a standby's
    readiness: could it take over and decide?)."""

    def queries(self) -> dict[str, str]:
        return freshness_queries()


def node_freshness_query() -> str:
    """Per node, the time of its dcgm-exporter's newest sample: a node whose exporter stopped
    answering is absent here from its first failed scrape (Prometheus marks its series stale;
    backfilled without markers, it is stale for 5 minutes, then absent) while the others are
    fresh, which the fleet-wide freshness cannot see. dcgm-exporter names the node in
    ``Hostname`` (``hostname`` in some versions)."""
    return f"max by (Hostname, hostname) (timestamp({names.DCGM_GPU_UTIL}))"


@dataclass(frozen=True, slots=True)
class QueryPlan:
    """The queries of one tick, by the sample name they are stored under."""

    hold_window: timedelta
    xid_lookback: timedelta
    step: timedelta = timedelta(seconds=30)

    def queries(self) -> dict[str, str]:
        look = promql_duration(self.xid_lookback)
        hold = subquery.promql_range(self.hold_window)
        step = promql_duration(self.step)
        loss = (
            f"max by (node) ({names.KSM_NODE_CAPACITY}{{{_GPU}}})"
            f" - max by (node) ({names.KSM_NODE_ALLOCATABLE}{{{_GPU}}})"
        )
        gauge = names.DCGM_XID_LAST
        return {
            # A healthy GPU's last Xid is 0; a missing value reads as 0 (policy.xid_signals),
            # so only non-zero ones are asked for: the answers grow with faults, not the fleet.
            names.DCGM_XID_LAST: f"{gauge} > 0",
            names.XID_LAST_24H_AGO: f"({gauge} offset {look}) > 0",
            names.XID_COUNT_RECENT: (
                f"max_over_time({names.DCGM_XID_COUNT}[{subquery.promql_range(self.xid_lookback)}])"
                " > 0"
            ),
            names.XID_TOTAL_RECENT: _recent_counter(names.XID_TOTAL, self.xid_lookback),
            names.FALLEN_OFF_BUS_RECENT: _recent_counter(
                names.FALLEN_OFF_BUS_TOTAL, self.xid_lookback
            ),
            # No loss, or none held, is no sample (policy.isolate reads absence as not held).
            names.GPU_LOSS_HELD: f"min_over_time(({loss})[{hold}:{step}]) > 0",
            # One series per node (about 75 bytes of answer each), by necessity: a node absent
            # here is silent (policy.freshness), so no filter can drop the healthy ones.
            names.DCGM_NODE_NEWEST: node_freshness_query(),
            names.AGENT_NODE_NEWEST: f"max by (node) (timestamp({names.AGENT_KERNEL_LINES_TOTAL}))",
            # The agent's PodResources opt-in (absent: dcgm labels): one per GPU a pod holds.
            names.GPU_POD: names.GPU_POD,
        } | freshness_queries()


    def node_state_queries(self) -> dict[str, str]:
        """Node facts from kube-state-metrics, for replaying history (backtest), where the
        Kubernetes API cannot say what a node looked like last month."""
        return {
            names.KSM_NODE_CAPACITY: f"{names.KSM_NODE_CAPACITY}{{{_GPU}}}",
            names.KSM_NODE_ALLOCATABLE: f"{names.KSM_NODE_ALLOCATABLE}{{{_GPU}}}",
            names.KSM_NODE_UNSCHEDULABLE: names.KSM_NODE_UNSCHEDULABLE,
            names.KSM_NODE_ANNOTATIONS: names.KSM_NODE_ANNOTATIONS,
        }


def _recent_counter(metric: str, lookback: timedelta) -> str:
    """Occurrences in the lookback: a series born inside it reads its value, every occurrence
    since it appeared (increase() alone reads a new counter's first value as no increase, and
    its second occurrence as one); an older one its growth there. Born means no sample in the
    lookback before it: ``offset`` alone sees only Prometheus' 5 min before that instant, so a
    series with a gap there (the node down for a reboot, its agent's counter kept) would read
    as new and its old count as a new fault. Both ranges are the lookback plus half a second,
    so Prometheus 2.x and 3.x select the same samples (``model.subquery``)."""
    look, range_ = promql_duration(lookback), subquery.promql_range(lookback)
    born = f"{metric} unless last_over_time({metric}[{range_}] offset {look})"
    return f"(({born}) + 0) or (increase({metric}[{range_}]) > 0)"


def promql_duration(delta: timedelta) -> str:
    """A duration in PromQL's syntax, in whole seconds (``600s``)."""
    return f"{int(delta.total_seconds())}s"


class PrometheusSource:
    """Reads one tick's samples from the Prometheus HTTP API."""

    def __init__(
        self,
        base_url: str,
        plan: Plan,
        *,
        staleness: timedelta = timedelta(minutes=2),
        client: query.Http | None = None,
        timeout_s: float = 10.0,
        scopes: Mapping[str, str] | None = None,
    ) -> None:
        self._url = base_url
        self._plan = plan
        self._scopes = dict(scopes or {})  # prometheus.scrape_scope (model.promql_scope)
        self._staleness = staleness
        self._client = client or query.http(timeout_s)
        self.queries_issued = 0

    def close(self) -> None:
        self._client.close()

    def samples(self, at: datetime, plan: Plan | None = None) -> tuple[fleet.MetricSample, ...]:
        """All of the plan's series at instant ``at`` (``plan``: another plan read through this
        reader, e.g. one scoped to some nodes); SourceError when any answer is bad."""
        collected: list[fleet.MetricSample] = []
        for name, promql in (plan or self._plan).queries().items():
            collected += self._vector(name, promql, at)
        self._check_fresh(collected, at)
        return tuple(s for s in collected if not s.name.startswith("freshness "))

    def _vector(self, name: str, promql: str, at: datetime) -> list[fleet.MetricSample]:
        self.queries_issued += 1
        answer = query.instant(self._client, self._url, name, promql, at, self._scopes)
        return parse_answer(name, answer.status_code, answer.content, "vector")

    def _check_fresh(self, samples: list[fleet.MetricSample], at: datetime) -> None:
        for family in (names.FRESHNESS_KSM, names.FRESHNESS_DCGM):
            stamps = [s.value for s in samples if s.name == family]
            if not stamps:
                raise SourceError(f"Prometheus has no series for {family!r}: refusing to decide")
            if not 0.0 <= max(stamps) < _LAST_SANE_TIME:
                raise SourceError(f"{family}: newest sample time {max(stamps)!r} is not a time")
            age = at - datetime.fromtimestamp(max(stamps), UTC)
            if age > self._staleness:
                raise SourceError(
                    f"{family}: newest sample is {age} old (bound {self._staleness})"
                )

    def history(
        self, start: datetime, end: datetime, step: timedelta
    ) -> Iterator[tuple[datetime, tuple[fleet.MetricSample, ...] | SourceError]]:
        """The plan's series (and node states) at every step of [start, end], from range
        queries in chunks: a constant number of queries per chunk, not per instant."""
        chunk = step * _CHUNK_STEPS
        cursor = datetime.fromtimestamp(subquery.evaluation_time(start), UTC)
        while cursor <= end:
            chunk_end = min(end, cursor + chunk - step)
            yield from self._history_chunk(cursor, chunk_end, step)
            cursor = chunk_end + step

    def _history_chunk(
        self, start: datetime, end: datetime, step: timedelta
    ) -> Iterator[tuple[datetime, tuple[fleet.MetricSample, ...] | SourceError]]:
        by_instant: dict[datetime, list[fleet.MetricSample]] = defaultdict(list)
        queries = self._plan.queries()
        if isinstance(self._plan, QueryPlan):
            queries |= self._plan.node_state_queries()
        for name, promql in queries.items():
            self.queries_issued += 1
            answer = query.over_range(self._client, self._url, name, promql,
                                      (start, end, step), self._scopes)  # fmt: skip
            for sample in parse_answer(name, answer.status_code, answer.content, "matrix"):
                by_instant[sample.timestamp].append(sample)
        instant = start
        while instant <= end:
            samples = by_instant.get(instant, [])
            try:
                self._check_fresh(samples, instant)
            except SourceError as e:
                yield instant, e
            else:
                yield instant, tuple(s for s in samples if not s.name.startswith("freshness "))
            instant += step


class _Point(msgspec.Struct, array_like=True, forbid_unknown_fields=True, gc=False):
    """``[<unix time>, "<value>"]``, each checked in ``_samples``."""

    stamp: Any
    text: Any


class _Series(msgspec.Struct, gc=False):
    """A result item: its label set and its sample (vector) or samples (matrix)."""

    metric: Any
    value: _Point | None = None
    values: list[_Point] | None = None


class _Data(msgspec.Struct, gc=False):
    resultType: Any = None
    result: list[_Series] | None = None


class _Answer(msgspec.Struct, gc=False):
    """An answer decoded into untracked structs: 10,000 series are then no work for the
    garbage collector, whose full collections over the controller's heap were most of the
    time a tick spent reading Prometheus."""

    status: Any = None
    error: Any = None
    warnings: Any = None
    data: _Data | None = None


_ANSWER = msgspec.json.Decoder(_Answer)


def parse_answer(name: str, status: int, body: bytes, kind: str) -> list[fleet.MetricSample]:
    """Validate a query answer (``vector`` or ``matrix``) into samples stored under ``name``;
    every deviation is a SourceError naming the query."""
    try:
        answer = _ANSWER.decode(body)
    except msgspec.ValidationError as e:
        message = f"HTTP {status}, malformed answer ({e})"
        raise SourceError(f"Prometheus query {name!r}: {message}") from e
    except msgspec.DecodeError as e:
        raise SourceError(f"Prometheus query {name!r}: HTTP {status}, body is not JSON") from e
    if status != 200 or answer.status != "success":
        raise SourceError(f"Prometheus query {name!r}: HTTP {status}, error {answer.error!r}")
    if answer.warnings:
        warnings = answer.warnings
        raise SourceError(f"Prometheus query {name!r}: partial answer, warnings {warnings!r:.200}")
    data = answer.data
    if data is None or data.resultType != kind or data.result is None:
        raise SourceError(f"Prometheus query {name!r}: expected a {kind} result, got {data!r:.80}")
    try:
        return _samples(name, data.result, kind)
    except (KeyError, TypeError, ValueError, IndexError, OverflowError) as e:
        raise SourceError(f"Prometheus query {name!r}: malformed sample ({e})") from e


_LAST_SANE_TIME = 4_102_444_800.0  # 2100-01-01T00:00:00Z


def _samples(name: str, result: list[_Series], kind: str) -> list[fleet.MetricSample]:
    """The samples of a result's series. Every sample of an instant query, and each step of a
    range query, shares one timestamp: each distinct one is checked and made a datetime once
    (20,000 series a tick at 10,000 nodes)."""
    times: dict[Any, datetime] = {}
    samples: list[fleet.MetricSample] = []
    for item in result:
        labels = _labels(item.metric)
        for point in _points(item, kind):
            when = times.get(point.stamp)
            if when is None:
                when = times[point.stamp] = _time(labels, point.stamp)
            value = float(point.text)
            if not math.isfinite(value):
                raise ValueError(f"value {point.text!r:.40} of {labels} is not a finite number")
            samples.append(fleet.MetricSample(name, labels, value, when))
    return samples


def _points(item: _Series, kind: str) -> list[_Point]:
    if kind == "vector":
        if item.value is None:
            raise KeyError("value")
        return [item.value]
    if item.values is None:
        raise KeyError("values")
    return item.values


def _labels(metric: Any) -> dict[str, str]:
    """A series' label set: the decoded object itself when every value is a string (JSON keys
    always are), no copy per series."""
    if not isinstance(metric, dict):
        raise TypeError(f'"metric" is {metric!r:.40}, not a label set')
    if all(type(v) is str for v in metric.values()):
        return metric
    return {str(k): str(v) for k, v in metric.items()}


def _time(labels: Mapping[str, str], stamp: Any) -> datetime:
    when = float(stamp)
    if not 0.0 <= when < _LAST_SANE_TIME:
        raise ValueError(f"timestamp {stamp!r:.40} of {dict(labels)} is not a time")
    return datetime.fromtimestamp(when, UTC)
