"""Every query the controller sends is scoped to the exporters' scrape jobs
(``prometheus.scrape_scope``): a series exported under dcgm-exporter's or the agent's metric
names by any other target is not read (docs/security.md#metric-forgery)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from gpuguard.model import promql_scope
from gpuguard.sources import fleet_health, gpu_metrics, prometheus

DCGM = 'job="nvidia-dcgm-exporter", namespace="gpu-operator"'
AGENT = 'job="gpuguard/gpuguard-agent"'
SCOPES = {"DCGM_": DCGM, "gpuguard_": AGENT}


@pytest.mark.parametrize(("query", "expected"), [
    pytest.param("max by (Hostname, hostname) (timestamp(DCGM_FI_DEV_GPU_UTIL))",
                 f"max by (Hostname, hostname) (timestamp(DCGM_FI_DEV_GPU_UTIL{{{DCGM}}}))",
                 id="bare-selector"),
    pytest.param("DCGM_FI_DEV_XID_ERRORS offset 24h",
                 f"DCGM_FI_DEV_XID_ERRORS{{{DCGM}}} offset 24h", id="offset"),
    pytest.param('group by (pod) (DCGM_FI_DEV_XID_ERRORS{pod!=""} <= 0)',
                 f'group by (pod) (DCGM_FI_DEV_XID_ERRORS{{{DCGM}, pod!=""}} <= 0)',
                 id="existing-matchers"),
    pytest.param("increase(gpuguard_xid_total[600s])",
                 f"increase(gpuguard_xid_total{{{AGENT}}}[600s])", id="range"),
    pytest.param('kube_node_status_capacity{resource="nvidia_com_gpu"}',
                 'kube_node_status_capacity{resource="nvidia_com_gpu"}', id="unscoped-family"),
    pytest.param('label_replace(DCGM_A, "d", "$1", "s", "DCGM_(.*)")',
                 f'label_replace(DCGM_A{{{DCGM}}}, "d", "$1", "s", "DCGM_(.*)")',
                 id="strings-untouched"),
])
def test_every_selector_of_a_scoped_family_gets_its_jobs_matchers(
    query: str, expected: str
) -> None:
    assert promql_scope.scoped(query, SCOPES) == expected
    assert promql_scope.scoped(query, {}) == query


def _plans() -> list[dict[str, str]]:
    return [prometheus.QueryPlan(timedelta(minutes=10), timedelta(hours=1)).queries(),
            fleet_health.HealthQueryPlan(timedelta(minutes=15),
                                         long_window=timedelta(hours=1)).queries(),
            gpu_metrics.GpuQueryPlan(window=timedelta(minutes=15)).queries()]


def test_no_selector_of_the_controllers_plans_is_left_unscoped() -> None:
    bare = re.compile(r"(?<![\w:\"'])((?:DCGM_|gpuguard_)[\w:]*)(?!\w)(?!\s*\{)(?!\s*\()")
    for plan in _plans():
        for name, query in plan.items():
            scoped = promql_scope.scoped(query, SCOPES)
            assert bare.findall(scoped) == [], (name, scoped)
            assert scoped.count("job=") == len(
                re.findall(r"(?<![\w:\"'])(?:DCGM_|gpuguard_)\w+(?!\s*\()", query)), name


def test_the_controllers_reader_sends_only_scoped_queries() -> None:
    sent: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.params["query"])
        return httpx.Response(200, json={"status": "success", "data": {
            "resultType": "vector", "result": []}})

    source = prometheus.PrometheusSource(
        "http://prometheus:9090", prometheus.QueryPlan(timedelta(minutes=10), timedelta(hours=1)),
        client=httpx.Client(transport=httpx.MockTransport(answer)), scopes=SCOPES)
    with pytest.raises(Exception, match="no series"):  # nothing answers: fails closed
        source.samples(datetime(2026, 12, 1, tzinfo=UTC))
    assert sent
    assert all("DCGM_" not in q or DCGM in q for q in sent)
