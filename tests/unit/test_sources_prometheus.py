"""The Prometheus reader fails closed and asks a constant number of queries per tick."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from gpuguard.errors import SourceError
from gpuguard.model import metric_names as names
from gpuguard.sources import prometheus
from tests import tools
from tests.prometheus_answers import AT, PLAN, fleet_answers, source, vector

MINUTE = timedelta(minutes=1)


def test_reads_samples_at_the_given_instant() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.params["time"])
        return fleet_answers(2)(request)

    samples = source(handler).samples(AT)
    assert {float(t) for t in seen} == {AT.timestamp()}
    xids = [s for s in samples if s.name == names.DCGM_XID_LAST]
    assert [(s.labels["Hostname"], s.value) for s in xids] == [("n0", 79.0), ("n1", 79.0)]
    assert not any(s.name.startswith("freshness") for s in samples)


def test_query_count_is_the_same_at_100_and_10000_nodes() -> None:
    small, large = source(fleet_answers(100)), source(fleet_answers(10_000))
    small.samples(AT)
    large.samples(AT)
    assert small.queries_issued == large.queries_issued == len(PLAN.queries())


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        pytest.param(503, b"upstream down", "not JSON", id="http-error-not-json"),
        pytest.param(200, b"{not json", "not JSON", id="unparseable-json"),
        pytest.param(
            422,
            json.dumps({"status": "error", "error": "bad_data"}).encode(),
            "bad_data",
            id="error-status",
        ),
        pytest.param(
            200,
            json.dumps({"status": "success", "data": {"resultType": "matrix"}}).encode(),
            "vector",
            id="wrong-result-type",
        ),
        pytest.param(
            200, vector([{"metric": {}, "value": ["x"]}]), "malformed", id="malformed-sample"
        ),
        pytest.param(
            200, vector([{"metric": None, "value": [1.0, "1"]}]), "not a label set",
            id="null-metric",
        ),
        pytest.param(
            200, vector([{"metric": {"node": "a"}, "value": [AT.timestamp(), "NaN"]}]),
            r"value 'NaN' of \{'node': 'a'\} is not a finite number", id="nan",
        ),
        pytest.param(
            200, vector([{"metric": {}, "value": [AT.timestamp(), "+Inf"]}]), "not a finite",
            id="inf",
        ),
        pytest.param(
            200, vector([{"metric": {}, "value": [1e20, "1"]}]), "timestamp 1e\\+20",
            id="absurd-timestamp",
        ),
        pytest.param(
            200, json.dumps({"status": "success", "warnings": ["store gateway unavailable"],
                             "data": {"resultType": "vector", "result": []}}).encode(),
            "partial answer, warnings", id="partial-answer-warnings",
        ),
    ],
)
def test_bad_answers_are_errors_never_no_targets(status: int, body: bytes, message: str) -> None:
    with pytest.raises(SourceError, match=message):
        source(lambda _: httpx.Response(status, content=body)).samples(AT)


def test_missing_kube_state_metrics_family_is_an_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if "kube_node_status_capacity" in request.url.params["query"]:
            return httpx.Response(200, content=vector([]))
        return fleet_answers(1)(request)

    with pytest.raises(SourceError, match="kube-state-metrics"):
        source(handler).samples(AT)


def test_stale_data_is_an_error() -> None:
    with pytest.raises(SourceError, match="old"):
        source(fleet_answers(1, age_s=600)).samples(AT)


def test_connection_failure_is_a_source_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(SourceError, match="connection refused"):
        source(refuse).samples(AT)


def test_an_absurd_freshness_time_is_a_source_error_not_a_crash() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.params["query"].startswith("max(timestamp("):
            return httpx.Response(200, content=vector([{"metric": {}, "value": [1, "1e15"]}]))
        return httpx.Response(200, content=vector([]))

    with pytest.raises(SourceError, match="is not a time"):
        source(answer).samples(AT)


def test_the_hold_window_is_asked_at_a_whole_second_over_a_range_no_step_can_sit_on() -> None:
    """Prometheus 2.x and 3.x differ only on a subquery step at exactly t - range
    (model.subquery): a whole-second t and a range of the window plus 0.5 s never meet one."""
    seen: list[tuple[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.params["query"], request.url.params["time"]))
        return fleet_answers(1)(request)

    source(handler).samples(AT - timedelta(milliseconds=300))
    assert {float(t) for _, t in seen} == {AT.timestamp()}  # the next whole second
    (held,) = [q for q, _ in seen if q.startswith("min_over_time(")]
    assert "[600500ms:30s])" in held


def test_a_long_history_is_read_in_day_long_range_queries_each_instant_once() -> None:
    ranges: list[tuple[float, float]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        start, end = float(request.url.params["start"]), float(request.url.params["end"])
        ranges.append((start, end))
        return httpx.Response(200, content=json.dumps(
            {"status": "success", "data": {"resultType": "matrix", "result": []}}).encode())

    instants = [at for at, _ in source(handler).history(AT, AT + timedelta(days=3), MINUTE)]
    assert len(instants) == 3 * 1440 + 1
    assert instants == sorted(set(instants))
    spans = sorted({end - start for start, end in ranges})
    assert max(spans) <= 86_400 - 60  # at most a day of 1-minute steps per query
    assert len({start for start, _ in ranges}) == 4  # three full days and the last instant


def test_a_counter_born_in_the_lookback_reads_every_occurrence_since(tmp_path: Path) -> None:
    """The agent's Xid counter appears at its first occurrence (value 1) and rises at its
    second: two occurrences in the lookback, not the one rise ``increase()`` sees; a counter
    older than the lookback reads its rise there (extrapolated, so whole occurrences count)."""
    plan = prometheus.QueryPlan(hold_window=MINUTE, xid_lookback=timedelta(minutes=30))
    born = 'gpuguard_xid_total{node="gpu-node-b",gpu="4",xid="79"}'
    older = 'gpuguard_xid_total{node="gpu-node-a",gpu="1",xid="79"}'
    tests = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": born, "values": "_x40 1x10 2x10"},
                         {"series": older, "values": "1x50 2x10"}],
        "promql_expr_test": [{
            "expr": plan.queries()[names.XID_TOTAL_RECENT], "eval_time": "60m",
            "exp_samples": [{"labels": born.removeprefix("gpuguard_xid_total"), "value": 2},
                            {"labels": older.removeprefix("gpuguard_xid_total"),
                             "value": 1800.5 / 1800}],  # 31 scrapes, to the range's start
        }],
    }]}  # fmt: skip
    tools.promtool_test(tests, tmp_path)
