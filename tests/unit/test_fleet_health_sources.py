"""The fleet-health read side (docs/fleet-health.md): Pod JSON into the gang detector's pods,
the Prometheus plan's PromQL evaluated by promtool on real series shapes, and dcgm-exporter's
pod mapping into GPUs per pod."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gpuguard.model import fleet, subquery
from gpuguard.model import metric_names as mn
from gpuguard.model import settings as settings_model
from gpuguard.sources import fleet_health, gang_pods
from tests import tools

AT = datetime(2026, 9, 1, tzinfo=UTC)
FLEET = settings_model.FleetHealthSettings()
# A counter's increase over the 15 min window's range (900.5 s, ``model.subquery``): 15 min of
# growth extrapolated by the half second to the range's start (a counter that started at zero
# inside the range is not).
EXTRAPOLATED = 900.5 / 900


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
                 "exp_samples": [{"labels": f'{{{gpu},counter="crc_flit"}}',
                                  "value": 30 * EXTRAPOLATED}]},
                {"expr": queries[mn.windowed(mn.IB_ERRORS_INCREASE, mn.LONG)], "eval_time": "60m",
                 "exp_samples": [{"labels": f'{{{ib},counter="link_downed"}}', "value": 3}]},
            ],
        }],
    }  # fmt: skip
    tools.promtool_test(tests, tmp_path)


def test_the_guards_plan_answers_only_what_can_make_a_finding(tmp_path: Path) -> None:
    """``for_settings``: GPU 3 throttles, its NVLink and PCIe counters grow, port mlx5_0 goes
    down; GPU 4 and port mlx5_1 are healthy and absent, but counted in the coverage. Of the
    pod mapping only the GPUs a workload holds (not the exporter's own pod), with the labels
    ``pod_gpus`` reads."""
    fleet_settings = FLEET.model_copy(update={"persistence_window": timedelta(hours=1)})
    queries = fleet_health.HealthQueryPlan.for_settings(fleet_settings).queries()
    gpu = 'gpu="3",UUID="GPU-3",Hostname="gpu-node-1"'
    calm = 'gpu="4",UUID="GPU-4",Hostname="gpu-node-1"'
    ib, flat = ('device="mlx5_0",port="1",instance="gpu-node-2:9100"',
                'device="mlx5_1",port="1",instance="gpu-node-2:9100"')  # fmt: skip
    counters = [(f"DCGM_FI_DEV_NVLINK_{c}_ERROR_COUNT_TOTAL", c.lower()) for c in
                ("CRC_FLIT", "CRC_DATA", "REPLAY", "RECOVERY")]  # fmt: skip
    inputs = [
        {"series": f"DCGM_FI_DEV_CLOCKS_EVENT_REASONS{{{gpu}}}", "values": "1x40 69x20"},
        {"series": f"DCGM_FI_DEV_CLOCKS_EVENT_REASONS{{{calm}}}", "values": "4x60"},  # power cap
        {"series": f"DCGM_FI_DEV_PCIE_REPLAY_COUNTER{{{gpu}}}", "values": "0+1x60"},
        {"series": f"DCGM_FI_DEV_PCIE_REPLAY_COUNTER{{{calm}}}", "values": "0x60"},
        {"series": f"node_infiniband_link_downed_total{{{ib}}}", "values": "0x50 3x10"},
        {"series": f"node_infiniband_symbol_error_total{{{ib}}}", "values": "0x60"},
        {"series": f"node_infiniband_link_downed_total{{{flat}}}", "values": "0x60"},
        {"series": f"node_infiniband_symbol_error_total{{{flat}}}", "values": "0x60"},
        {"series": f'DCGM_FI_DEV_GPU_UTIL{{{gpu},pod="tp",namespace="ml",container="w"}}',
         "values": "90x60"},
        {"series": f'DCGM_FI_DEV_GPU_UTIL{{{calm},pod="nvidia-dcgm-exporter-x1",namespace="gpu",'
                   'exported_pod="nb",exported_namespace="ds"}', "values": "90x60"},
        {"series": 'DCGM_FI_DEV_GPU_UTIL{gpu="5",Hostname="gpu-node-1",'
                   'pod="nvidia-dcgm-exporter-x1"}', "values": "0x60"},
    ] + [{"series": f"{metric}{{{gpu}}}", "values": "0+2x60" if c == "crc_flit" else "0x60"}
         for metric, c in counters] + [{"series": f"{metric}{{{calm}}}", "values": "0x60"}
                                       for metric, _ in counters]  # fmt: skip
    expected = {
        mn.windowed(mn.THROTTLE_FRACTION, mn.SHORT): [_reason(gpu, "hw-thermal", 1)],
        mn.windowed(mn.THROTTLE_FRACTION, mn.LONG): [_reason(gpu, "hw-thermal", 20 / 61)],
        mn.windowed(mn.NVLINK_ERRORS_INCREASE, mn.SHORT):
            [{"labels": f'{{{gpu},counter="{c}"}}', "value": 30 * EXTRAPOLATED if c == "crc_flit"
              else 0}
             for _, c in counters],
        mn.windowed(mn.PCIE_REPLAYS_INCREASE, mn.SHORT):
            [{"labels": f"{{{gpu}}}", "value": 15 * EXTRAPOLATED}],
        mn.windowed(mn.IB_ERRORS_INCREASE, mn.SHORT): [
            {"labels": f'{{{ib},counter="link_downed"}}', "value": 3},
            {"labels": f'{{{ib},counter="symbol_error"}}', "value": 0}],
        mn.windowed(mn.IB_ERRORS_INCREASE, mn.LONG):
            [{"labels": f'{{{ib},counter="link_downed"}}', "value": 3}],
        mn.GPU_POD_MAPPING: [
            {"labels": '{gpu="3",Hostname="gpu-node-1",namespace="ml",pod="tp"}', "value": 1},
            {"labels": '{gpu="4",Hostname="gpu-node-1",namespace="gpu",pod="nvidia-dcgm-'
                       'exporter-x1",exported_namespace="ds",exported_pod="nb"}', "value": 1}],
        mn.coverage(mn.THROTTLE_FRACTION): [{"labels": "{}", "value": 2}],
        mn.coverage(mn.NVLINK_ERRORS_INCREASE): [{"labels": "{}", "value": 8}],
        mn.coverage(mn.PCIE_REPLAYS_INCREASE): [{"labels": "{}", "value": 2}],
        mn.coverage(mn.IB_ERRORS_INCREASE): [{"labels": "{}", "value": 4}],
    }  # fmt: skip
    tests = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": inputs,
        "promql_expr_test": [{"expr": queries[name], "eval_time": "60m", "exp_samples": samples}
                             for name, samples in expected.items()],
    }]}  # fmt: skip
    tools.promtool_test(tests, tmp_path)


def test_a_threshold_of_zero_filters_nothing() -> None:
    """Every series makes a finding at 0, so none may be filtered out."""
    zero = FLEET.model_copy(update={"throttle_min_fraction": 0.0, "pcie_replays_min": 0.0,
                                    "nvlink_errors_min": 0.0})  # fmt: skip
    queries = fleet_health.HealthQueryPlan.for_settings(zero).queries()
    assert " >= " not in queries[mn.windowed(mn.THROTTLE_FRACTION, mn.SHORT)]
    assert queries[mn.windowed(mn.PCIE_REPLAYS_INCREASE, mn.SHORT)].startswith("increase(")
    assert " and " not in queries[mn.windowed(mn.NVLINK_ERRORS_INCREASE, mn.SHORT)]


def _reason(gpu: str, reason: str, value: float) -> dict[str, Any]:
    return {"labels": f'{{{gpu},reason="{reason}"}}', "value": value}


def test_every_subquery_range_starts_between_steps_so_prometheus_2_and_3_agree() -> None:
    plan = fleet_health.HealthQueryPlan(timedelta(minutes=15), long_window=timedelta(hours=6))
    ranges = [r for q in plan.queries().values() for r in re.findall(r"\[(\w+):(\w+)\]", q)]
    assert ranges  # the throttle shares are subqueries
    for range_, step in ranges:  # t - R never on the step grid: no left-open/closed difference
        assert range_ in {subquery.promql_range(plan.window),
                          subquery.promql_range(plan.long_window)}, (range_, step)  # fmt: skip
