"""The one Prometheus query path: what every reader sends, and how a failure reads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest

from gpuguard.clients import prometheus
from gpuguard.errors import SourceError

AT = datetime(2026, 12, 4, 10, 0, 0, 250_000, tzinfo=UTC)
SCOPES = {"DCGM_FI_DEV_XID_ERRORS": 'job="nvidia-dcgm-exporter"'}


def recording(asked: list[httpx.Request]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        return httpx.Response(200, json={"status": "success", "data": {"result": []}})

    return httpx.MockTransport(answer)


def test_an_instant_query_is_asked_at_the_next_whole_second_and_scoped() -> None:
    asked: list[httpx.Request] = []
    with httpx.Client(transport=recording(asked)) as client:
        answer = prometheus.instant(client, "http://p/", "xid", "DCGM_FI_DEV_XID_ERRORS > 0", AT,
                                    SCOPES)  # fmt: skip
    assert answer.status_code == 200
    (request,) = asked
    assert request.url.path == "/api/v1/query"
    assert request.url.params["time"] == str(float(int(AT.timestamp()) + 1))
    assert request.url.params["query"] == 'DCGM_FI_DEV_XID_ERRORS{job="nvidia-dcgm-exporter"} > 0'


def test_with_no_instant_prometheus_answers_at_its_own_now() -> None:
    asked: list[httpx.Request] = []
    with httpx.Client(transport=recording(asked)) as client:
        prometheus.instant(client, "http://p", "up", "up", None)
    assert "time" not in asked[0].url.params


def test_a_range_query_names_its_window_and_step() -> None:
    asked: list[httpx.Request] = []
    with httpx.Client(transport=recording(asked)) as client:
        prometheus.over_range(client, "http://p", "xid", "DCGM_FI_DEV_XID_ERRORS",
                              (AT, AT + timedelta(hours=1), timedelta(seconds=30)), SCOPES)
    params = asked[0].url.params
    assert asked[0].url.path == "/api/v1/query_range"
    assert (params["start"], params["step"]) == (str(AT.timestamp()), "30.0")
    assert params["query"] == 'DCGM_FI_DEV_XID_ERRORS{job="nvidia-dcgm-exporter"}'


def test_no_answer_is_one_source_error_naming_the_query_and_the_url() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with httpx.Client(transport=httpx.MockTransport(refuse)) as client, pytest.raises(
        SourceError, match=r"Prometheus query 'xid' failed \(http://p:9090/api/v1/query\): "
                           "connection refused"):  # fmt: skip
        prometheus.instant(client, "http://p:9090", "xid", "DCGM_FI_DEV_XID_ERRORS", AT)


def test_the_rules_answer_that_is_no_json_names_the_url() -> None:
    def garbage(_: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="<html>login</html>")

    with httpx.Client(transport=httpx.MockTransport(garbage)) as client, pytest.raises(
        SourceError, match=r"GET http://p/api/v1/rules failed"
    ):
        prometheus.rules(client, "http://p")
