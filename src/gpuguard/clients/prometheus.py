"""Prometheus's query API: the one way gpuguard asks it for an instant vector
(``GET /api/v1/query``) or a range of them (``GET /api/v1/query_range``, backtest).

One rule for every reader (the tick's metrics, the GPU windows, the audit, the gate's check
statuses): the query is scoped to the exporters' scrape jobs (``model.promql_scope``) and asked
at the whole second after the instant it describes (``model.subquery.evaluation_time``), so the
answer holds every sample up to it; with no instant, at Prometheus's own now. The wait is named
for a command's deadline (``model.waits``) and a failed request is one ``SourceError`` naming
the query and the URL. The caller decodes the answer (``sources.prometheus.parse_answer``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import httpx

from gpuguard.errors import SourceError
from gpuguard.model import promql_scope, subquery, waits

QUERY_PATH = "/api/v1/query"
RANGE_PATH = "/api/v1/query_range"
RULES_PATH = "/api/v1/rules"
Http = httpx.Client  # what the readers hold between queries (a connection pool)


def http(timeout_s: float) -> Http:
    """A client for one reader, each request bounded by ``timeout_s``."""
    return httpx.Client(timeout=timeout_s)


def instant(
    client: Http,
    base_url: str,
    name: str,
    promql: str,
    at: datetime | None,
    scopes: Mapping[str, str] | None = None,
) -> httpx.Response:
    """The answer to ``promql`` (called ``name`` in errors) at ``at`` from the Prometheus at
    ``base_url``; ``SourceError`` when no answer came."""
    params: dict[str, str | float] = {"query": promql_scope.scoped(promql, scopes or {})}
    if at is not None:
        params["time"] = subquery.evaluation_time(at)
    return _get(client, base_url.rstrip("/") + QUERY_PATH, name, params)


def over_range(
    client: Http,
    base_url: str,
    name: str,
    promql: str,
    window: tuple[datetime, datetime, timedelta],
    scopes: Mapping[str, str] | None = None,
) -> httpx.Response:
    """The answers to ``promql`` at every ``step`` from ``start`` to ``end`` (``window``), as
    ``instant`` asks for one."""
    start, end, step = window
    params: dict[str, str | float] = {
        "query": promql_scope.scoped(promql, scopes or {}),
        "start": start.timestamp(),
        "end": end.timestamp(),
        "step": step.total_seconds(),
    }
    return _get(client, base_url.rstrip("/") + RANGE_PATH, name, params)


def _get(
    client: Http, url: str, name: str, params: Mapping[str, str | float]
) -> httpx.Response:
    try:
        with waits.on(f"Prometheus ({url}, query {name!r})"):
            return client.get(url, params=params)
    except httpx.HTTPError as e:
        raise SourceError(f"Prometheus query {name!r} failed ({url}): {e}") from e


def rules(client: Http, base_url: str) -> tuple[str, int, Any]:
    """``GET /api/v1/rules``: its URL, status and decoded JSON; ``SourceError`` when no JSON
    answer came."""
    url = base_url.rstrip("/") + RULES_PATH
    try:
        with waits.on(f"Prometheus ({url})"):
            response = client.get(url)
        return url, response.status_code, response.json()
    except (httpx.HTTPError, ValueError) as e:
        raise SourceError(f"GET {url} failed: {e}") from e
