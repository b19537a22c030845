"""The queries people's commands send (``gpuguard audit``, ``health``, ``gate``) are scoped as
the controller's are (``prometheus.scrape_scope``, ``model.promql_scope``;
docs/security.md#metric-forgery): a series a tenant exports under the agent's or
dcgm-exporter's metric name is not asked for."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from gpuguard.clients import prometheus as prometheus_client
from gpuguard.sources import audit, onboarding
from tests.audit_builders import AT

SCOPES = {"gpuguard_": 'job="gpuguard/gpuguard-agent"', "DCGM_": 'job="nvidia-dcgm-exporter"'}
EMPTY = {"status": "success", "data": {"resultType": "vector", "result": []}}


def recording(asked: list[str]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.params["query"])
        return httpx.Response(200, content=json.dumps(EMPTY))

    return httpx.MockTransport(answer)


def test_the_audits_label_queries_are_scoped() -> None:
    asked: list[str] = []
    with httpx.Client(transport=recording(asked)) as http:
        audit.label_values(http, "http://p", AT, "max by (Hostname) (DCGM_FI_DEV_GPU_UTIL)",
                           ("Hostname",), SCOPES)  # fmt: skip
        audit.label_values(http, "http://p", AT, "DCGM_FI_DEV_GPU_UTIL", ("Hostname",))
    assert asked == ['max by (Hostname) (DCGM_FI_DEV_GPU_UTIL{job="nvidia-dcgm-exporter"})',
                     "DCGM_FI_DEV_GPU_UTIL"]  # fmt: skip


def test_the_gates_check_statuses_are_scoped(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    real = httpx.Client

    def client(timeout_s: float) -> httpx.Client:
        return real(transport=recording(asked), timeout=timeout_s)

    monkeypatch.setattr(prometheus_client, "http", client)
    assert onboarding.check_statuses("http://p", "gpu-node-17", scopes=SCOPES) == {}
    (query,) = asked  # the return facts' own query for the node, each selector scoped
    selectors = re.findall(r"gpuguard_check_status\{([^}]*)\}", query)
    assert selectors, query
    assert all('job="gpuguard/gpuguard-agent"' in s for s in selectors), query
    assert 'node=~"gpu\\\\-node\\\\-17"' in query
