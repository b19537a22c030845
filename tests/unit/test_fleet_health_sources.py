"""The fleet-health read side (docs/fleet-health.md): Pod JSON into the gang detector's pods,
the Prometheus plan's PromQL evaluated by promtool on real series shapes, and dcgm-exporter's
pod mapping into GPUs per pod."""

from __future__ import annotations

import re
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from gpuguard.model import fleet, subquery
from gpuguard.model import metric_names as mn
from gpuguard.sources import fleet_health, gang_pods
from tests import tools

AT = datetime(2026, 9, 1, tzinfo=UTC)


def api_pod(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ml", "name": "llm-worker-3", "creationTimestamp": "2026-09-01T10:00:00Z",
            "labels": {"volcano.sh/job-name": "llm"},
            "annotations": {"scheduling.k8s.io/group-name": "llm-pg"},
            "ownerReferences": [{"kind": "Job", "name": "llm", "controller": True, "uid": "u"}],
        },
        "spec": {"schedulerName": "volcano",
                 "containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": "8"}}},
                                {"name": "sidecar"}]} | spec,
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "lastTransitionTime": "2026-09-01T10:00:05Z",
             "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}]},
    }  # fmt: skip


def test_a_pending_pod_reads_as_unschedulable_since_its_condition() -> None:
    pod = gang_pods.workload_pod(api_pod())
    assert (pod.namespace, pod.name, pod.node, pod.phase) == ("ml", "llm-worker-3", None, "Pending")
    assert pod.gpu_request == 8
    assert pod.scheduler == "volcano"
    assert pod.unschedulable_since == datetime(2026, 9, 1, 10, 0, 5, tzinfo=UTC)
    assert "Insufficient" in pod.unschedulable_message
    assert pod.controller is not None
    assert pod.controller.name == "llm"
    assert not pod.gated


def test_gates_and_workload_references_are_read() -> None:
    pod = gang_pods.workload_pod(api_pod(
        schedulingGates=[{"name": "kueue.x-k8s.io/admission"}],
        workloadRef={"name": "llm", "podGroup": "workers"},
    ))  # fmt: skip
    assert pod.gated
    assert pod.workload_ref == "llm/workers"
    newer = gang_pods.workload_pod(api_pod(schedulingGroup={"podGroupName": "workers"}))
    assert newer.workload_ref == "workers"


def test_a_bound_pod_is_not_unschedulable() -> None:
    obj = api_pod(nodeName="gpu-node-1")
    obj["status"] = {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]}
    pod = gang_pods.workload_pod(obj)
    assert pod.bound
    assert pod.unschedulable_since is None


def test_pod_mapping_gives_each_pod_its_gpus() -> None:
    def util(gpu: str, **labels: str) -> fleet.MetricSample:
        base = {"Hostname": "gpu-node-1", "gpu": gpu, "UUID": f"GPU-{gpu}"}
        return fleet.MetricSample(mn.GPU_POD_MAPPING, base | labels, 90.0, AT)

    samples = [util("0", namespace="ml", pod="tp"), util("2", namespace="ml", pod="tp"),
               util("1", pod="nvidia-dcgm-exporter-x1"),  # the exporter's own pod: no workload
               util("3")]  # fmt: skip
    assert fleet_health.pod_gpus(samples) == {"gpu-node-1": {"ml/tp": (0, 2)}}


# ---- the plan's PromQL, evaluated by promtool ------------------------------------------------


def test_plan_queries_evaluate_as_documented(tmp_path: Path) -> None:
    promtool = tools.require("promtool")
    plan = fleet_health.HealthQueryPlan(timedelta(minutes=15), long_window=timedelta(hours=1))
    queries = plan.queries()
    gpu = 'gpu="3",UUID="GPU-3",Hostname="gpu-node-1"'
    ib = 'device="mlx5_0",port="1",instance="gpu-node-2:9100"'
    tests = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                # idle (0x1) for 40 min, then HW thermal (0x40) + SW power cap (0x4) + idle
                {"series": f"DCGM_FI_DEV_CLOCKS_EVENT_REASONS{{{gpu}}}", "values": "1x40 69x20"},
                {"series": f"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL{{{gpu}}}",
                 "values": "0+2x60"},
                {"series": f"DCGM_FI_DEV_PCIE_REPLAY_COUNTER{{{gpu}}}", "values": "0x60"},
                {"series": f"node_infiniband_link_downed_total{{{ib}}}", "values": "0x50 3x10"},
            ],
            "promql_expr_test": [
                {"expr": queries[mn.windowed(mn.THROTTLE_FRACTION, mn.SHORT)], "eval_time": "60m",
                 "exp_samples": [_reason(gpu, r, v) for r, v in (
                     ("hw-thermal", 1), ("sw-power-cap", 1), ("hw-slowdown", 0),
                     ("sw-thermal", 0), ("hw-power-brake", 0))]},
                {"expr": queries[mn.windowed(mn.THROTTLE_FRACTION, mn.LONG)], "eval_time": "60m",
                 "exp_samples": [_reason(gpu, r, v) for r, v in (
                     ("hw-thermal", 20 / 61), ("sw-power-cap", 20 / 61), ("hw-slowdown", 0),
                     ("sw-thermal", 0), ("hw-power-brake", 0))]},  # [0m, 60m]: 61 steps (2.x, 3.x)
                {"expr": queries[mn.windowed(mn.NVLINK_ERRORS_INCREASE, mn.SHORT)],
                 "eval_time": "60m",
                 "exp_samples": [{"labels": f'{{{gpu},counter="crc_flit"}}', "value": 30}]},
                {"expr": queries[mn.windowed(mn.IB_ERRORS_INCREASE, mn.LONG)], "eval_time": "60m",
                 "exp_samples": [{"labels": f'{{{ib},counter="link_downed"}}', "value": 3}]},
            ],
        }],
    }  # fmt: skip
    path = tmp_path / "plan_test.yaml"
    path.write_text(yaml.safe_dump(tests))
    done = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def _reason(gpu: str, reason: str, value: float) -> dict[str, Any]:
    return {"labels": f'{{{gpu},reason="{reason}"}}', "value": value}


def test_every_subquery_range_starts_between_steps_so_prometheus_2_and_3_agree() -> None:
    plan = fleet_health.HealthQueryPlan(timedelta(minutes=15), long_window=timedelta(hours=6))
    ranges = [r for q in plan.queries().values() for r in re.findall(r"\[(\w+):(\w+)\]", q)]
    assert ranges  # the throttle shares are subqueries
    for range_, step in ranges:  # t - R never on the step grid: no left-open/closed difference
        assert range_ in {subquery.promql_range(plan.window),
                          subquery.promql_range(plan.long_window)}, (range_, step)  # fmt: skip
