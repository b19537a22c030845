"""Canned Prometheus HTTP API answers and a PrometheusSource over them (httpx MockTransport)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import httpx

from gpuguard.model import metric_names as names
from gpuguard.sources import prometheus

AT = datetime(2026, 9, 21, 5, 53, 30, tzinfo=UTC)


PLAN = prometheus.QueryPlan(hold_window=timedelta(minutes=10), xid_lookback=timedelta(hours=24))


def vector(results: list[dict[str, object]]) -> bytes:
    return json.dumps(
        {"status": "success", "data": {"resultType": "vector", "result": results}}
    ).encode()


def fleet_answers(nodes: int, *, age_s: float = 5.0) -> Callable[[httpx.Request], httpx.Response]:
    fresh = AT.timestamp() - age_s

    def answer(request: httpx.Request) -> httpx.Response:
        query = request.url.params["query"]
        if query.startswith("max(timestamp("):
            return httpx.Response(200, content=vector([{"metric": {}, "value": [1, str(fresh)]}]))
        if query == PLAN.queries()[names.DCGM_XID_LAST]:
            series = [
                {"metric": {"Hostname": f"n{i}", "gpu": "4"}, "value": [AT.timestamp(), "79"]}
                for i in range(nodes)
            ]
            return httpx.Response(200, content=vector(series))
        return httpx.Response(200, content=vector([]))

    return answer


def source(handler: Callable[[httpx.Request], httpx.Response]) -> prometheus.PrometheusSource:
    client = httpx.Client(transport=httpx.MockTransport(handler))
    return prometheus.PrometheusSource("http://prom:9090", PLAN, client=client)
