"""The guard's Prometheus reader: a fixed set of instant queries per tick, whatever the fleet
size, evaluated at one instant (``time=``), failing closed.

A non-success status, unparseable JSON, a missing expected series family (no
kube-state-metrics GPU capacity, no dcgm-exporter series at all) or data older than the
staleness bound raises ``SourceError`` — never "no targets", which would read as "all healthy".
Windows (the hold window, the Xid lookback) are evaluated by Prometheus, so a restarted guard
decides exactly as the one before it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from gpuguard.errors import SourceError
from gpuguard.model import fleet
from gpuguard.model import metric_names as names

_GPU = f'resource="{names.GPU_RESOURCE_LABEL}"'
FRESHNESS_KSM = "freshness kube-state-metrics"
FRESHNESS_DCGM = "freshness dcgm-exporter"


@dataclass(frozen=True, slots=True)
class QueryPlan:
    """The queries of one tick, by the sample name they are stored under."""

    hold_window: timedelta
    xid_lookback: timedelta
    step: timedelta = timedelta(seconds=30)

    def queries(self) -> dict[str, str]:
        look = _promql_duration(self.xid_lookback)
        hold = _promql_duration(self.hold_window)
        step = _promql_duration(self.step)
        loss = (
            f"max by (node) ({names.KSM_NODE_CAPACITY}{{{_GPU}}})"
            f" - max by (node) ({names.KSM_NODE_ALLOCATABLE}{{{_GPU}}})"
        )
        return {
            names.DCGM_XID_LAST: names.DCGM_XID_LAST,
            names.XID_LAST_24H_AGO: f"{names.DCGM_XID_LAST} offset {look}",
            names.XID_COUNT_RECENT: f"max_over_time({names.DCGM_XID_COUNT}[{look}]) > 0",
            names.XID_TOTAL_RECENT: _recent_counter(names.XID_TOTAL, look),
            names.FALLEN_OFF_BUS_RECENT: _recent_counter(names.FALLEN_OFF_BUS_TOTAL, look),
            names.GPU_LOSS_HELD: f"min_over_time(({loss})[{hold}:{step}])",
            FRESHNESS_KSM: f"max(timestamp({names.KSM_NODE_CAPACITY}{{{_GPU}}}))",
            FRESHNESS_DCGM: f"max(timestamp({names.DCGM_GPU_UTIL}))",
        }


def _recent_counter(metric: str, look: str) -> str:
    """Occurrences in the lookback, including a series born inside it (increase() alone
    reads a new counter's first value as no increase)."""
    return f"(increase({metric}[{look}]) > 0) or (({metric} unless {metric} offset {look}) + 0)"


def _promql_duration(delta: timedelta) -> str:
    return f"{int(delta.total_seconds())}s"


class PrometheusSource:
    """Reads one tick's samples from the Prometheus HTTP API."""

    def __init__(
        self,
        base_url: str,
        plan: QueryPlan,
        *,
        staleness: timedelta = timedelta(minutes=2),
        client: httpx.Client | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        self._url = base_url.rstrip("/") + "/api/v1/query"
        self._plan = plan
        self._staleness = staleness
        self._client = client or httpx.Client(timeout=timeout_s)
        self.queries_issued = 0

    def close(self) -> None:
        self._client.close()

    def samples(self, at: datetime) -> tuple[fleet.MetricSample, ...]:
        """All of the plan's series at instant ``at``; SourceError when any answer is bad."""
        collected: list[fleet.MetricSample] = []
        for name, promql in self._plan.queries().items():
            collected += [
                fleet.MetricSample(name, labels, value, when)
                for labels, value, when in self._vector(name, promql, at)
            ]
        self._check_fresh(collected, at)
        return tuple(s for s in collected if not s.name.startswith("freshness "))

    def _vector(
        self, name: str, promql: str, at: datetime
    ) -> list[tuple[dict[str, str], float, datetime]]:
        self.queries_issued += 1
        try:
            response = self._client.get(self._url, params={"query": promql, "time": at.timestamp()})
        except httpx.HTTPError as e:
            raise SourceError(f"Prometheus query {name!r} failed: {e}") from e
        return parse_vector(name, response.status_code, response.content)

    def _check_fresh(self, samples: list[fleet.MetricSample], at: datetime) -> None:
        for family in (FRESHNESS_KSM, FRESHNESS_DCGM):
            stamps = [s.value for s in samples if s.name == family]
            if not stamps:
                raise SourceError(f"Prometheus has no series for {family!r}: refusing to decide")
            age = at - datetime.fromtimestamp(max(stamps), UTC)
            if age > self._staleness:
                raise SourceError(
                    f"{family}: newest sample is {age} old (bound {self._staleness})"
                )


def parse_vector(
    name: str, status: int, body: bytes
) -> list[tuple[dict[str, str], float, datetime]]:
    """Validate an instant-query answer; every deviation is a SourceError naming the query."""
    try:
        payload: Any = httpx.Response(status, content=body).json()
    except ValueError as e:
        raise SourceError(f"Prometheus query {name!r}: HTTP {status}, body is not JSON") from e
    if status != 200 or not isinstance(payload, dict) or payload.get("status") != "success":
        error = payload.get("error") if isinstance(payload, dict) else None
        raise SourceError(f"Prometheus query {name!r}: HTTP {status}, error {error!r}")
    data = payload.get("data")
    if not isinstance(data, Mapping) or data.get("resultType") != "vector":
        raise SourceError(f"Prometheus query {name!r}: expected a vector result, got {data!r:.80}")
    try:
        return [_sample(item) for item in data["result"]]
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise SourceError(f"Prometheus query {name!r}: malformed sample ({e})") from e


def _sample(item: Mapping[str, Any]) -> tuple[dict[str, str], float, datetime]:
    labels = {str(k): str(v) for k, v in item["metric"].items()}
    stamp, value = item["value"]
    return labels, float(value), datetime.fromtimestamp(float(stamp), UTC)
