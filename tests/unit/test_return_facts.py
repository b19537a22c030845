"""The return facts' Prometheus plan and its readers: constant queries that fail closed, row
remap pending, PCIe links against their maximum (generation only under load), agent checks."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import httpx
import pytest

from gpuguard.errors import SourceError
from gpuguard.model import decisions, fleet, return_to_pool
from gpuguard.model import metric_names as names
from gpuguard.sources import node_scope, prometheus, return_facts

AT = datetime(2026, 9, 22, 16, 30, tzinfo=UTC)
PLAN = return_facts.ReturnFactsPlan()


def sample(name: str, value: float, gpu: str = "4", **labels: str) -> fleet.MetricSample:
    return fleet.MetricSample(name, {"Hostname": "gpu-node-b", "gpu": gpu, **labels}, value, AT)


def link(**values: float) -> list[fleet.MetricSample]:
    return [sample(name, value) for name, value in values.items()]


W, G = names.DCGM_PCIE_LINK_WIDTH, names.DCGM_PCIE_LINK_GEN
MAX_W, MAX_G = names.DCGM_PCIE_MAX_LINK_WIDTH, names.DCGM_PCIE_MAX_LINK_GEN


@pytest.mark.parametrize(
    ("samples", "expected"),
    [
        pytest.param(
            [sample(W, 8), sample(G, 5), sample(MAX_W, 16), sample(MAX_G, 5)],
            return_to_pool.PcieLink("4", 8, 16, 5, 5), id="x8-of-x16-from-dcgm-max-fields",
        ),
        pytest.param(
            [sample(W, 8), sample(G, 5), sample(return_facts.WIDTH_SEEN_MAX, 16),
             sample(return_facts.GEN_SEEN_MAX, 5)],
            return_to_pool.PcieLink("4", 8, 16, 5, 5), id="x8-against-the-x16-seen-this-week",
        ),
        pytest.param(
            [sample(W, 16), sample(G, 1), sample(MAX_G, 5), sample(names.DCGM_GPU_UTIL, 0)],
            return_to_pool.PcieLink("4", 16, 16, 1, 5, under_load=False),
            id="idle-gen1-is-not-load",
        ),
        pytest.param(
            [sample(W, 16), sample(G, 3), sample(MAX_G, 5), sample(names.DCGM_GPU_UTIL, 100)],
            return_to_pool.PcieLink("4", 16, 16, 3, 5, under_load=True),
            id="gen3-under-burn-in-load",
        ),
    ],
)  # fmt: skip
def test_pcie_link_against_its_maximum(
    samples: list[fleet.MetricSample], expected: return_to_pool.PcieLink
) -> None:
    assert return_facts.pcie_links(samples) == (expected,)


def test_a_gpu_without_a_width_reading_reports_no_link() -> None:
    assert return_facts.pcie_links([sample(MAX_W, 16), sample(names.DCGM_GPU_UTIL, 0)]) == ()


def test_row_remap_pending_per_gpu_and_absent_on_cards_without_it() -> None:
    pending = [sample(names.DCGM_ROW_REMAP_PENDING, v, gpu=str(i)) for i, v in enumerate([0, 1])]
    assert return_facts.row_remap_pending(pending) == {"0": 0.0, "1": 1.0}
    assert return_facts.row_remap_pending([sample(names.DCGM_GPU_UTIL, 0)]) == {}


def test_agent_checks_take_the_status_set_to_one() -> None:
    series = [
        fleet.MetricSample(names.CHECK_STATUS, {"node": "gpu-node-b", "check": c, "status": s},
                           v, AT)
        for c, s, v in [("ipvs-persisted", "PASS", 1), ("ipvs-persisted", "FAIL", 0),
                        ("nvidia-blacklist", "FAIL", 1), ("dns", "bogus", 1)]
    ]  # fmt: skip
    assert return_facts.conformance(series) == {
        "ipvs-persisted": decisions.CheckStatus.PASS,
        "nvidia-blacklist": decisions.CheckStatus.FAIL,
    }


def test_dcgm_reporting_needs_the_exporters_utilisation_series() -> None:
    assert return_facts.dcgm_reporting([sample(names.DCGM_GPU_UTIL, 0)])
    assert not return_facts.dcgm_reporting([sample(names.DCGM_XID_LAST, 79)])


def vector(results: list[dict[str, object]]) -> bytes:
    return json.dumps(
        {"status": "success", "data": {"resultType": "vector", "result": results}}
    ).encode()


def answers(fresh_age_s: float) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        query = request.url.params["query"]
        if query.startswith("max(timestamp("):
            stamp = str(AT.timestamp() - fresh_age_s)
            return httpx.Response(200, content=vector([{"metric": {}, "value": [1, stamp]}]))
        if query == names.DCGM_ROW_REMAP_PENDING:
            labels = {"Hostname": "gpu-node-b", "gpu": "4"}
            return httpx.Response(200, content=vector([{"metric": labels, "value": [1, "1"]}]))
        return httpx.Response(200, content=vector([]))

    return httpx.MockTransport(answer)


def test_the_plan_reads_through_the_guards_prometheus_source_in_constant_queries() -> None:
    source = prometheus.PrometheusSource(
        "http://prom:9090", PLAN, client=httpx.Client(transport=answers(5))
    )
    try:
        samples = source.samples(AT)
    finally:
        source.close()
    assert source.queries_issued == len(PLAN.queries())
    assert return_facts.row_remap_pending(samples) == {"4": 1.0}


def test_stale_data_fails_closed() -> None:
    source = prometheus.PrometheusSource(
        "http://prom:9090", PLAN, client=httpx.Client(transport=answers(3600))
    )
    try:
        with pytest.raises(SourceError, match="old"):
            source.samples(AT)
    finally:
        source.close()


ODD_NAMES = ("gpu-node-b.rack-2", "a_b", 'odd|na"me\\')


def test_a_scoped_query_selects_each_node_label_spelling_of_exactly_the_nodes() -> None:
    scoped = return_facts.ReturnFactsPlan(nodes=ODD_NAMES).queries()
    width = scoped[names.DCGM_PCIE_LINK_WIDTH]
    assert [f"{{{label}=~" in width for label in ("node", "Hostname", "hostname")] == [True] * 3
    assert node_scope.scope_of(width) == ODD_NAMES
    assert node_scope.scope_of(scoped[return_facts.GEN_SEEN_MAX]) == ODD_NAMES
    regex = node_scope.node_regex(ODD_NAMES)
    assert [n for n in [*ODD_NAMES, "gpu-node-bXrack-2", "a_b2", "odd"]
            if re.fullmatch(regex, n)] == list(ODD_NAMES)  # fmt: skip
    assert node_scope.scope_of(PLAN.queries()[names.DCGM_PCIE_LINK_WIDTH]) is None


def test_scoped_batches_bound_the_regex_and_ask_each_node_once() -> None:
    fleet_nodes = [f"gpu-node-{i:05d}.rack-{i % 40}" for i in range(300)]
    batches = PLAN.batches([*fleet_nodes, *fleet_nodes[:10]], node_scope.MATCHER_CHARS)
    asked = [n for b in batches for n in b.nodes or ()]
    assert sorted(asked) == sorted(fleet_nodes)
    assert len(batches) > 1
    assert all(node_scope.encoded_length(b.nodes or ()) <= node_scope.MATCHER_CHARS
               for b in batches)  # fmt: skip
    assert PLAN.batches([], node_scope.MATCHER_CHARS) == []
