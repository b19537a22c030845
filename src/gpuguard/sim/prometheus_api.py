"""Prometheus' HTTP API in front of answers the simulator computes itself, for ``gpuguard sim
serve`` where no ``prometheus`` binary is installed.

It speaks the API as Prometheus documents it (https://prometheus.io/docs/prometheus/latest/
querying/api/): ``GET|POST /api/v1/query`` (``query``, ``time``: RFC 3339 or Unix seconds,
default now) answers ``{"status": "success", "data": {"resultType": "vector", "result":
[{"metric": {...}, "value": [<unix seconds>, "<value>"]}]}}``; ``/api/v1/query_range``
(``start``, ``end``, ``step``: seconds or a duration such as ``30s``) a ``matrix`` with
``values``; ``/api/v1/status/buildinfo``; ``/-/ready`` and ``/-/healthy``. A query it cannot
answer gets Prometheus' error shape, ``{"status": "error", "errorType": "bad_data", "error":
...}`` with HTTP 400, as Prometheus answers a query it cannot parse.

What a query means is not decided here: ``Answers`` maps a query text to samples (the demo
layer maps gpuguard's own queries to the simulator's emulation, ``sim.prometheus_view``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http import server as httpserver
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from gpuguard.sim import metrics_server

VERSION = "2.45.0-gpuguard-sim"  # what buildinfo reports: the emulated API's version
_MAX_POINTS = 11_000  # Prometheus refuses a range query with more points per series

Sample = tuple[Mapping[str, str], float]


class QueryRefused(Exception):
    """The query is one the answers cannot give; the message says why (HTTP 400)."""


class Answers(Protocol):
    def now(self) -> datetime: ...

    def instant(self, query: str, at: datetime) -> list[Sample]: ...


@dataclass(frozen=True)
class PrometheusApi:
    url: str


def handle(answers: Answers, path: str, params: Mapping[str, str]) -> tuple[int, Any]:
    """(HTTP status, JSON body) for a request path and its parameters: the whole routing,
    testable without sockets."""
    try:
        if path == "/api/v1/query":
            at = _time(params.get("time"), answers.now(), "time")
            return 200, _success("vector", [_vector_item(s, at) for s in _ask(answers, params, at)])
        if path == "/api/v1/query_range":
            return 200, _success("matrix", _matrix(answers, params))
        if path == "/api/v1/status/buildinfo":
            return 200, {"status": "success", "data": {"version": VERSION, "revision": "",
                                                       "branch": "", "goVersion": ""}}
    except QueryRefused as e:
        return 400, {"status": "error", "errorType": "bad_data", "error": str(e)}
    if path in ("/-/ready", "/-/healthy"):
        return 200, "Prometheus Server is Ready.\n"
    return 404, {"status": "error", "errorType": "not_found", "error": f"no {path}"}


def _ask(answers: Answers, params: Mapping[str, str], at: datetime) -> list[Sample]:
    query = params.get("query")
    if not query:
        raise QueryRefused("invalid parameter \"query\": no query given")
    return answers.instant(query, at)


def _matrix(answers: Answers, params: Mapping[str, str]) -> list[dict[str, Any]]:
    now = answers.now()
    start = _time(params.get("start"), None, "start")
    end = _time(params.get("end"), None, "end")
    step = _step(params.get("step"))
    if end < start:
        raise QueryRefused("invalid parameter \"end\": end timestamp must not be before start time")
    if (end - start) / step > _MAX_POINTS:
        raise QueryRefused("exceeded maximum resolution of 11,000 points per timeseries. "
                           "Try decreasing the query resolution (?step=XX)")
    series: dict[tuple[tuple[str, str], ...], list[list[Any]]] = {}
    at = start
    while at <= min(end, now):
        for labels, value in _ask(answers, params, at):
            series.setdefault(tuple(sorted(labels.items())), []).append(_point(at, value))
        at += step
    return [{"metric": dict(key), "values": values} for key, values in series.items()]


def _success(kind: str, result: list[dict[str, Any]]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": kind, "result": result}}


def _vector_item(sample: Sample, at: datetime) -> dict[str, Any]:
    labels, value = sample
    return {"metric": dict(labels), "value": _point(at, value)}


def _point(at: datetime, value: float) -> list[Any]:
    """Prometheus writes a value as a string ("NaN", "+Inf" included) beside Unix seconds."""
    if math.isnan(value):
        text = "NaN"
    elif math.isinf(value):
        text = "+Inf" if value > 0 else "-Inf"
    else:
        text = repr(float(value)) if value != int(value) else str(int(value))
    return [at.timestamp(), text]


def _time(text: str | None, default: datetime | None, name: str) -> datetime:
    if not text:
        if default is None:
            raise QueryRefused(f"invalid parameter \"{name}\": missing")
        return default
    try:
        return datetime.fromtimestamp(float(text), UTC)
    except (ValueError, OverflowError, OSError):
        pass
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError as e:
        raise QueryRefused(f"invalid parameter \"{name}\": cannot parse {text!r} "
                           "to a valid timestamp") from e


_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def _step(text: str | None) -> timedelta:
    if not text:
        raise QueryRefused("invalid parameter \"step\": missing")
    try:
        seconds = float(text)
    except ValueError:
        parts = _DURATION.findall(text)
        if "".join(n + u for n, u in parts) != text:
            raise QueryRefused(f"invalid parameter \"step\": cannot parse {text!r} "
                               "to a valid duration") from None
        seconds = sum(int(n) * _UNIT_S[u] for n, u in parts)
    if not seconds > 0 or not math.isfinite(seconds):
        raise QueryRefused("zero or negative query resolution step widths are not accepted. "
                           "Try a positive integer")
    return timedelta(seconds=seconds)


def _handler(answers: Answers) -> type[httpserver.BaseHTTPRequestHandler]:
    class Handler(httpserver.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._answer(urlsplit(self.path).query)

        def do_POST(self) -> None:  # Prometheus takes the form body as well
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode(errors="replace")
            query = urlsplit(self.path).query
            self._answer(f"{query}&{body}" if query else body)

        def _answer(self, query_string: str) -> None:
            params = {k: v[-1] for k, v in parse_qs(query_string).items()}
            try:
                status, body = handle(answers, urlsplit(self.path).path, params)
            except Exception as e:  # the world must never take the server down
                status = 422
                body = {"status": "error", "errorType": "execution",
                        "error": f"{type(e).__name__}: {e}"}
            if isinstance(body, str):
                metrics_server.reply(self, status, "text/plain", body.encode())
            else:
                metrics_server.reply(self, status, "application/json", json.dumps(body).encode())

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: gpuguard queries several times a tick."""

    return Handler


@contextmanager
def serve(answers: Answers, host: str = "127.0.0.1", port: int = 0) -> Iterator[PrometheusApi]:
    """Serve ``answers`` as Prometheus' HTTP API on ``host:port`` (0: a free port) until exit."""
    with metrics_server.serving(_handler(answers), host, port, "sim-prometheus") as url:
        yield PrometheusApi(url)
