"""The agent's process counts reach the phantom policy through Prometheus: a GPU with a
process is never phantom (docs/design.md#phantom-utilization), and with no agent the pod join alone
decides and the finding says the process list was not collected."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from gpuguard.catalog import gpu_models
from gpuguard.model import fleet
from gpuguard.model import metric_names as mn
from gpuguard.model import settings as settings_model
from gpuguard.policy import phantom
from gpuguard.sources import gpu_metrics
from tests.builders import PHANTOM_READINGS

NOW = datetime(2026, 4, 21, 5, 0, tzinfo=UTC)
PLAN = gpu_metrics.GpuQueryPlan(window=timedelta(minutes=15))
NODE = "gpu-node-1"
Answers = Mapping[str, list[tuple[dict[str, str], float]]]


def dcgm(gpu: str) -> dict[str, str]:
    return {"Hostname": NODE, "gpu": gpu, "UUID": f"GPU-{gpu}", "modelName": "RTX 5090"}


def agent(gpu: str) -> dict[str, str]:
    return {"node": NODE, "uuid": f"GPU-{gpu}"}


def seed_phantoms(*gpus: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The phantom incident's [docs/design.md#incidents] gpu-node-1: the given GPUs busy with
    nothing and no GPU pod on the node."""
    answers: dict[str, list[tuple[dict[str, str], float]]] = {
        mn.window_stat(metric, stat): [(dcgm(g), value) for g in gpus]
        for metric, value in PHANTOM_READINGS.items()
        for stat in mn.WINDOW_STATS
    }
    answers[mn.GPU_SEEN_AT_WINDOW_START] = [(dcgm(g), 100.0) for g in gpus]
    answers[mn.NODE_GPU_PODS_MAX] = [({"node": NODE}, 0.0)]
    answers[gpu_metrics.FRESHNESS] = [({}, NOW.timestamp())]
    return answers


def prometheus(answers: Answers) -> httpx.Client:
    """A Prometheus HTTP API that answers each planned query from ``answers`` (else empty)."""
    by_query = {q: name for name, q in PLAN.queries().items()}

    def handle(request: httpx.Request) -> httpx.Response:
        name = by_query[request.url.params["query"]]
        result = [
            {"metric": labels, "value": [NOW.timestamp(), str(value)]}
            for labels, value in answers.get(name, [])
        ]
        body = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return httpx.Response(200, content=json.dumps(body))

    return httpx.Client(transport=httpx.MockTransport(handle))


def read(answers: Answers) -> gpu_metrics.GpuReadings:
    with gpu_metrics.GpuMetricsSource("http://prom", PLAN, client=prometheus(answers)) as source:
        readings = source.readings(NOW)
        assert source.queries_issued == len(PLAN.queries())  # one more query, still constant
    return readings


def decide(readings: gpu_metrics.GpuReadings) -> phantom.PhantomDecision:
    settings = settings_model.PhantomSettings()
    models = gpu_models.load_table()
    return phantom.decide(readings.windows, settings, models, NOW, readings.processes)


CASES = [
    pytest.param({"5": 0.0, "6": 0.0}, {"GPU-5": 0, "GPU-6": 0}, ["5", "6"], id="seed000-none"),
    pytest.param({"5": 2.0, "6": 0.0}, {"GPU-5": 2, "GPU-6": 0}, ["6"], id="process-rules-out"),
    pytest.param({}, None, ["5", "6"], id="no-agent-pod-join-decides"),
]  # fmt: skip


@pytest.mark.parametrize(("counts", "processes", "phantoms"), CASES)
def test_agent_process_counts_reach_the_phantom_decision(
    counts: dict[str, float], processes: dict[str, int] | None, phantoms: list[str]
) -> None:
    answers = seed_phantoms("5", "6")
    answers[mn.GPU_PROCESSES_MAX] = [(agent(g), n) for g, n in counts.items()]
    readings = read(answers)
    assert readings.processes == processes
    assert [w.gpu for w in readings.windows] == ["5", "6"]  # the agent's series are no GPUs
    assert [p.gpu for p in decide(readings).phantoms] == phantoms


def test_without_an_agent_the_finding_says_process_list_not_collected() -> None:
    p, _ = decide(read(seed_phantoms("5", "6"))).phantoms
    (evidence,) = [e for e in p.finding.evidence if e.source == "processes on this GPU"]
    assert evidence.value == "not collected"


def test_a_gpu_counted_by_two_agent_series_keeps_the_most_processes() -> None:
    samples = [fleet.MetricSample(mn.GPU_PROCESSES_MAX, agent("5"), n, NOW) for n in (0, 3)]
    assert gpu_metrics.processes_from_samples(samples) == {"GPU-5": 3}
