"""The guard's phantom plan asks the per-GPU window queries only of the nodes with a GPU that
may be phantom (docs/design.md#phantom-utilization): a series without a workload pod busy over
the whole window. The candidate query is evaluated by promtool on real series shapes; the
reader asks nothing more of a fleet without candidates, and of a candidate node every GPU, so
the policy decides as on the whole fleet's answer."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

import httpx

from gpuguard.catalog import gpu_models
from gpuguard.model import metric_names as mn
from gpuguard.model import settings as settings_model
from gpuguard.policy import phantom
from gpuguard.sources import gpu_metrics
from tests import tools
from tests.builders import PHANTOM_READINGS

NOW = datetime(2026, 4, 21, 5, 0, tzinfo=UTC)
SETTINGS = settings_model.PhantomSettings()
SCOPED = gpu_metrics.GpuQueryPlan.for_settings(SETTINGS)
WHOLE = gpu_metrics.GpuQueryPlan(window=SETTINGS.hold)
Answers = Mapping[str, list[tuple[dict[str, str], float]]]


def test_the_candidate_nodes_are_those_with_a_gpu_busy_without_a_workload_pod(
    tmp_path: Path,
) -> None:
    series = [
        ('DCGM_FI_DEV_GPU_UTIL{Hostname="n1",gpu="1"}', "100x30"),  # phantom-like
        ('DCGM_FI_DEV_GPU_UTIL{Hostname="n2",gpu="0",pod="train-0",namespace="ml"}', "100x30"),
        ('DCGM_FI_DEV_GPU_UTIL{Hostname="n3",gpu="0",pod="nvidia-dcgm-exporter-x1"}', "100x30"),
        ('DCGM_FI_DEV_GPU_UTIL{Hostname="n4",gpu="0",pod="nvidia-dcgm-exporter-x1",'
         'exported_pod="nb"}', "100x30"),  # behind a ServiceMonitor: the workload's pod
        ('DCGM_FI_DEV_GPU_UTIL{hostname="n5",gpu="0"}', "50x30"),
        ('DCGM_FI_PROF_SM_ACTIVE{hostname="n5",gpu="0"}', "0.97x30"),  # profiled: SM decides
        ('DCGM_FI_DEV_GPU_UTIL{Hostname="n6",gpu="0"}', "100x25 10x5"),  # not the whole window
        ('DCGM_FI_PROF_GR_ENGINE_ACTIVE{node="n7",gpu="0"}', "0.95x30"),  # not over 0.95
    ]  # fmt: skip
    tests = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in series],
        "promql_expr_test": [{
            "expr": SCOPED.queries()[mn.PHANTOM_CANDIDATE_NODES], "eval_time": "30m",
            "exp_samples": [{"labels": labels, "value": 1} for labels in (
                '{Hostname="n1"}', '{Hostname="n3"}', '{hostname="n5"}')],
        }],
    }]}  # fmt: skip
    tools.promtool_test(tests, tmp_path)


def dcgm(node: str, gpu: str, **labels: str) -> dict[str, str]:
    return {"Hostname": node, "gpu": gpu, "UUID": f"GPU-{node}-{gpu}",
            "modelName": "NVIDIA H100 80GB HBM3"} | labels  # fmt: skip


def fleet_answers(candidate: bool) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Two nodes: n1's GPU 0 held by a training pod; GPU 1 busy with nothing when
    ``candidate``, else idle; n2 a training node. No GPU pods counted on n1 but GPU 0's."""
    busy = dict(PHANTOM_READINGS) | {mn.DCGM_FB_USED: 60_000.0, mn.DCGM_DRAM_ACTIVE: 0.4}
    idle = dict.fromkeys(PHANTOM_READINGS, 0.0)
    gpus = [(dcgm("n1", "0", pod="train-0", namespace="ml"), busy),
            (dcgm("n1", "1"), PHANTOM_READINGS if candidate else idle),
            (dcgm("n2", "0", pod="train-1", namespace="ml"), busy)]  # fmt: skip
    answers = {
        mn.window_stat(metric, stat): [(labels, values[metric]) for labels, values in gpus]
        for metric in PHANTOM_READINGS
        for stat in mn.WINDOW_STATS
    }
    answers[mn.GPU_SEEN_AT_WINDOW_START] = [(labels, 1.0) for labels, _ in gpus]
    answers[mn.NODE_GPU_PODS_MAX] = [({"node": "n1"}, 1.0), ({"node": "n2"}, 1.0)]
    answers[mn.PHANTOM_CANDIDATE_NODES] = [({"Hostname": "n1"}, 1.0)] if candidate else []
    answers[gpu_metrics.FRESHNESS] = [({}, NOW.timestamp())]
    return answers


class Prometheus:
    """Answers each query of ``plan`` (fleet-wide, or of the named nodes) from ``answers``,
    per-GPU answers of those nodes only; any other query fails the test."""

    def __init__(self, plan: gpu_metrics.GpuQueryPlan, answers: Answers) -> None:
        self.asked: list[str] = []
        self._routes = {q: (name, None) for name, q in plan.queries().items()}
        self._routes |= {q: (name, None) for name, q in plan.node_queries(None).items()}
        for nodes in (("n1",), ("n2",), ("n1", "n2")):
            self._routes |= {q: (n, nodes) for n, q in plan.node_queries(nodes).items()}
        self._answers = answers

    def handle(self, request: httpx.Request) -> httpx.Response:
        query = request.url.params["query"]
        name, nodes = self._routes[query]
        self.asked.append(name)
        result = [
            {"metric": labels, "value": [NOW.timestamp(), str(value)]}
            for labels, value in self._answers.get(name, [])
            if nodes is None or labels.get("Hostname", labels.get("node")) in nodes
        ]
        body = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return httpx.Response(200, content=json.dumps(body))


def read(plan: gpu_metrics.GpuQueryPlan, answers: Answers, most_batches: int = 8) -> tuple[
    gpu_metrics.GpuReadings, list[str]
]:  # fmt: skip
    fake = Prometheus(plan, answers)
    client = httpx.Client(transport=httpx.MockTransport(fake.handle))
    with gpu_metrics.GpuMetricsSource("http://prom", plan, client=client,
                                      most_batches=most_batches) as source:  # fmt: skip
        return source.readings(NOW), fake.asked


def decide(readings: gpu_metrics.GpuReadings) -> phantom.PhantomDecision:
    return phantom.decide(readings.windows, SETTINGS, gpu_models.load_table(), NOW,
                          readings.processes)  # fmt: skip


def test_a_fleet_without_candidates_is_asked_no_gpu_window() -> None:
    readings, asked = read(SCOPED, fleet_answers(candidate=False))
    assert sorted(asked) == sorted(SCOPED.queries())
    assert readings.windows == ()
    assert decide(readings).phantoms == ()
    assert decide(read(WHOLE, fleet_answers(candidate=False))[0]).phantoms == ()


def test_a_candidate_nodes_every_gpu_is_read_and_decided_as_on_the_whole_fleet() -> None:
    readings, asked = read(SCOPED, fleet_answers(candidate=True))
    assert sorted(set(asked) - set(SCOPED.queries())) == sorted(SCOPED.node_queries(("n1",)))
    assert [(w.node, w.gpu) for w in readings.windows] == [("n1", "0"), ("n1", "1")]
    whole = read(WHOLE, fleet_answers(candidate=True))[0]
    assert decide(readings) == decide(whole)
    assert [(p.node, p.gpu) for p in decide(readings).phantoms] == [("n1", "1")]


def test_candidates_past_the_batches_are_read_from_the_whole_fleet_once() -> None:
    """Without dcgm's pod mapping every busy node is a candidate: past ``most_batches`` the
    per-GPU queries are asked once of the whole fleet (no more queries than the unscoped
    plan), and only the candidate nodes' series are kept."""
    readings, asked = read(SCOPED, fleet_answers(candidate=True), most_batches=0)
    assert len(asked) == len(SCOPED.queries()) + len(SCOPED.node_queries(None))
    assert readings == read(SCOPED, fleet_answers(candidate=True))[0]
    assert {w.node for w in readings.windows} == {"n1"}


def test_the_whole_fleets_plan_asks_every_gpu() -> None:
    """``gpuguard utilization`` reads every GPU: the unscoped plan asks no candidates and no
    node matcher."""
    queries = WHOLE.queries()
    assert mn.PHANTOM_CANDIDATE_NODES not in queries
    assert not [q for q in queries.values() if "Hostname=~" in q]
    assert "Hostname=~" in SCOPED.node_queries(("n1",))[mn.window_stat(mn.DCGM_POWER, "min")]
