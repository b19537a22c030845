"""The fleet-health detectors as audit rules: a job holding GPUs while part of it cannot be
placed, a pod across GPUs without NVLink, throttling and interconnect errors; a kind whose
series Prometheus does not have is not checked."""

from __future__ import annotations

from datetime import timedelta

from gpuguard.model import fleet
from gpuguard.model import metric_names as mn
from gpuguard.model.audit import Input, RuleStatus, Severity
from tests.audit_builders import AT, pod, run_rule, stamp, view

P = Input.PODS
GPU = {"Hostname": "gpu-1", "gpu": "3", "UUID": "GPU-3"}


def pending(name: str, since: timedelta, labels: dict[str, str]) -> dict[str, object]:
    return pod(name, node_name=None, labels=labels, status={
        "phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "lastTransitionTime": stamp(AT - since), "message": "0/4 nodes: Insufficient GPU"}]})


def test_job_half_placed_for_longer_than_the_grace_is_high_with_gpu_hours() -> None:
    job = {"job-name": "llm"}
    pods = [pod("llm-0", labels=job), pending("llm-1", timedelta(minutes=30), job)]
    [finding] = run_rule("GANG-1", view({P: pods})).findings
    assert finding.severity is Severity.HIGH
    assert finding.objects == ("Job/ml/llm", "Node/gpu-1")
    assert "4.0 GPU-hours" in finding.evidence  # 8 GPUs held for 30 min
    brief = [pod("llm-0", labels=job), pending("llm-1", timedelta(minutes=2), job)]
    assert run_rule("GANG-1", view({P: brief})).status is RuleStatus.NO_FINDING


def sample(what: str, value: float, **labels: str) -> fleet.MetricSample:
    return fleet.MetricSample(mn.windowed(what, mn.SHORT), GPU | labels, value, AT)


def test_throttled_gpu_and_nvlink_errors_become_findings() -> None:
    samples = (sample(mn.THROTTLE_FRACTION, 0.8, reason="hw-thermal"),
               sample(mn.NVLINK_ERRORS_INCREASE, 50, counter="crc_flit"))
    v = view(health_samples=samples)
    [throttled] = run_rule("THROTTLE-1", v).findings
    assert throttled.objects == ("Node/gpu-1 GPU 3",)
    assert run_rule("NVLINK-1", v).findings[0].severity is Severity.HIGH
    assert run_rule("PCIE-1", v).status is RuleStatus.NOT_CHECKED  # no replay series at all
    assert run_rule("IB-1", v).status is RuleStatus.NOT_CHECKED


def link(a: int, b: int, path: str) -> fleet.MetricSample:
    labels = {"node": "gpu-1", "gpu": str(a), "peer": str(b), "link": path}
    return fleet.MetricSample(mn.GPU_NVLINK_PEER, labels, 1.0, AT)


def test_pod_across_nvlink_pairs_when_a_pair_was_free_is_a_topology_finding() -> None:
    pairs = [(0, 1, "NV12"), (2, 3, "NV12"), (0, 2, "SYS"), (0, 3, "SYS"), (1, 2, "SYS"),
             (1, 3, "SYS")]
    samples = tuple(link(*p) for p in pairs)
    held = {"gpu-1": {"ml/tp": (0, 2)}}
    [finding] = run_rule("TOPO-1", view(health_samples=samples, pod_gpus=held)).findings
    assert finding.objects == ("Node/gpu-1 GPU 0,2",)
    aligned = {"gpu-1": {"ml/tp": (0, 1)}}
    assert run_rule("TOPO-1", view(health_samples=samples, pod_gpus=aligned)).findings == ()
    assert run_rule("TOPO-1", view()).status is RuleStatus.NOT_CHECKED


def test_fleet_rules_without_the_fleet_health_answer_are_not_checked() -> None:
    v = view(missing={Input.PROM_FLEET_HEALTH: "Prometheus: stale"})
    for rule in ("TOPO-1", "THROTTLE-1", "NVLINK-1", "PCIE-1", "IB-1"):
        assert run_rule(rule, v).status is RuleStatus.NOT_CHECKED, rule
