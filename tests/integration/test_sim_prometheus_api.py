"""``gpuguard sim serve`` without a ``prometheus`` binary: the simulator's own answers over
Prometheus' HTTP API, read by the product's own ``PrometheusSource`` over real HTTP."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from gpuguard.demo import live_prometheus
from gpuguard.errors import SourceError
from gpuguard.model import metric_names as mn
from gpuguard.model import series, settings
from gpuguard.sim import live, scenario
from gpuguard.sources import onboarding, prometheus, return_facts

SPEED = 600.0  # ten minutes of scenario per second: xid79-twice's fault (3m59s) in 0.4 s
FAULT_SEEN = timedelta(minutes=5)
GUARD = settings.GuardSettings()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[live.LiveCluster]:
    spec = scenario.load_shipped("xid79-twice")
    emulation = live_prometheus.answers_for(GUARD, SPEED)
    folder: Path = tmp_path_factory.mktemp("serve")
    with live.serve(spec, folder, speed=SPEED, emulation=emulation,
                    prefer_emulation=True) as served:
        deadline = time.monotonic() + 30
        while served.world.elapsed < FAULT_SEEN and time.monotonic() < deadline:
            served.catch_up()  # the loop `gpuguard sim serve` runs, until the fault is in
        yield served


def source(url: str) -> prometheus.PrometheusSource:
    iso = GUARD.isolation
    return prometheus.PrometheusSource(url, prometheus.QueryPlan(iso.hold_window,
                                                                 iso.xid_lookback))


def test_the_banner_says_the_simulators_own_answers_are_served(
    cluster: live.LiveCluster,
) -> None:
    assert cluster.prometheus_kind == live.SIMULATED
    assert cluster.urls()["prometheus"] == cluster.prometheus


def test_gpuguards_prometheus_source_reads_the_fault_over_http(cluster: live.LiveCluster) -> None:
    assert cluster.prometheus is not None
    samples = source(cluster.prometheus).samples(datetime.now(UTC))
    xids = {(s.labels.get("Hostname"), s.value) for s in samples if s.name == mn.DCGM_XID_LAST}
    assert ("gpu-node-b", 79.0) in xids
    nodes = {s.labels.get("Hostname") for s in samples if s.name == mn.DCGM_NODE_NEWEST}
    assert nodes >= {"gpu-node-a", "gpu-node-b"}


def test_the_return_facts_scoped_to_one_node_answer_only_that_node(
    cluster: live.LiveCluster,
) -> None:
    assert cluster.prometheus is not None
    reader = prometheus.PrometheusSource(cluster.prometheus, return_facts.ReturnFactsPlan())
    samples = return_facts.ReturnFactsSource(reader).samples_of(datetime.now(UTC), ["gpu-node-b"])
    reader.close()
    assert {series.node_of(s.labels) for s in samples} == {"gpu-node-b"}
    xids = {s.value for s in samples if s.name == mn.DCGM_XID_LAST}
    assert xids == {79.0}
    assert any(s.name == mn.DCGM_PCIE_LINK_WIDTH for s in samples)
    # the GPU plan sends the same text for its last utilisation: one text, one answer, and the
    # return facts need it (no utilisation series reads as "dcgm-exporter not reporting")
    assert {s.labels.get("gpu") for s in samples if s.name == mn.DCGM_GPU_UTIL} == {
        str(i) for i in range(8) if i != 4  # GPU 4 fell off the bus
    }


def test_health_and_gate_read_the_nodes_check_statuses_from_it(cluster: live.LiveCluster) -> None:
    """``gpuguard health`` and ``gate`` ask for one node's agent check statuses: the query is
    answered (the simulated agents report none), not refused with HTTP 400."""
    assert cluster.prometheus is not None
    assert onboarding.check_statuses(cluster.prometheus, "gpu-node-b") == {}


def test_a_query_it_cannot_answer_gets_prometheus_error_shape(cluster: live.LiveCluster) -> None:
    answer = httpx.get(f"{cluster.prometheus}/api/v1/query", params={"query": "up"})
    assert answer.status_code == 400
    body = answer.json()
    assert (body["status"], body["errorType"]) == ("error", "bad_data")
    assert "gpuguard's own queries" in body["error"]
    plan = prometheus.QueryPlan(timedelta(minutes=2), GUARD.isolation.xid_lookback)
    with pytest.raises(SourceError, match=r"'gpu loss held': HTTP 400.*sim serve"):
        prometheus.PrometheusSource(str(cluster.prometheus), plan).samples(datetime.now(UTC))


def test_range_queries_and_buildinfo_answer_as_prometheus_does(cluster: live.LiveCluster) -> None:
    # the last 50 ms of wall time: at least 4.5 min into the scenario, past the fault; on a
    # whole millisecond, so that start and end read back as exactly 50 ms apart (from any
    # time, their float seconds' rounding to microseconds made them 49.999 ms apart, and the
    # third step fall past the end, in about one run in twenty)
    now = int(datetime.now(UTC).timestamp() * 1000) / 1000
    xid = prometheus.QueryPlan(GUARD.isolation.hold_window,
                               GUARD.isolation.xid_lookback).queries()[mn.DCGM_XID_LAST]
    params = {"query": xid, "start": str(now - 0.05), "end": str(now),
              "step": "25ms"}
    answer = httpx.get(f"{cluster.prometheus}/api/v1/query_range", params=params)
    points = [
        sample for sample in prometheus.parse_answer("xid", answer.status_code, answer.content,
                                                     "matrix")
        if sample.labels.get("Hostname") == "gpu-node-b" and sample.labels.get("gpu") == "4"
    ]
    assert [sample.value for sample in points] == [79.0, 79.0, 79.0]
    info = httpx.get(f"{cluster.prometheus}/api/v1/status/buildinfo").json()
    assert info["status"] == "success"
    assert info["data"]["version"]
    bad = httpx.get(f"{cluster.prometheus}/api/v1/query_range",
                    params={"query": "x", "start": "1", "end": "2", "step": "0"})
    assert bad.status_code == 400
    assert bad.json()["errorType"] == "bad_data"
