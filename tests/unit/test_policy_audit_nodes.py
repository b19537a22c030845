"""Node and version rules of the audit: each fires on the incident's shape and stays quiet on
a healthy one; a missing input is "not checked", never a pass."""

from __future__ import annotations

import json
from datetime import timedelta

from gpuguard.model import annotation_keys, gpu_isolation
from gpuguard.model.audit import Input, PromRule, RuleStatus, Severity
from tests.audit_builders import AT, node, pod, run_rule, view

N, P = Input.NODES, Input.PODS


def test_cordon_older_than_72h_is_reported_with_the_alerts_it_silences() -> None:
    old = node("gpu-1", cordoned_at=AT - timedelta(days=38),
               annotations={"ops/reason": "fan noise"})
    silencing = PromRule("gpu", "GpuXid", "DCGM_FI_DEV_XID_ERRORS > 0 unless on(node) "
                         "kube_node_spec_unschedulable == 1")
    result = run_rule("CORDON-1", view({N: [old]}, rules=(silencing,)))
    [finding] = result.findings
    assert finding.objects == ("Node/gpu-1",)
    assert "38.0 days" in finding.evidence
    assert "GpuXid" in finding.evidence


def test_recent_cordon_with_a_reason_is_fine_but_one_without_a_reason_is_not() -> None:
    reasoned = node("gpu-1", cordoned_at=AT - timedelta(hours=2),
                    annotations={"ops/reason": "bios update"})
    silent = node("gpu-2", cordoned_at=AT - timedelta(hours=2))
    result = run_rule("CORDON-1", view({N: [reasoned, silent]}))
    assert [f.objects for f in result.findings] == [("Node/gpu-2",)]


def test_cordon_age_from_prometheus_when_managed_fields_have_none() -> None:
    isolated = node("gpu-1", cordoned=True, annotations={annotation_keys.ISOLATED_AT: "x"})
    result = run_rule("CORDON-1", view({N: [isolated]},
                                       prom_nodes={Input.PROM_CORDON_72H: frozenset({"gpu-1"})}))
    assert [f.severity for f in result.findings] == [Severity.MEDIUM]


def test_kubelet_newer_than_the_api_server_breaks_the_skew_policy() -> None:
    nodes = [node("new", kubelet="v1.35.7"), node("same", kubelet="v1.34.1"),
             node("old", kubelet="v1.30.2")]
    result = run_rule("SKEW-1", view({N: nodes}, version="v1.34.3+rke2r1"))
    assert {f.objects[0]: f.severity for f in result.findings} == {
        "Node/new": Severity.HIGH, "Node/old": Severity.HIGH}


def test_skew_without_the_api_server_version_is_not_checked() -> None:
    result = run_rule("SKEW-1", view({N: [node("a")]}, version=None,
                                     missing={Input.API_VERSION: "GET /version: 403"}))
    assert result.status is RuleStatus.NOT_CHECKED
    assert "403" in result.why


def test_schedulable_gpu_node_with_a_fault_condition_or_lost_gpu() -> None:
    nodes = [node("xid", conditions={"XIDErrors": "True"}), node("lost", allocatable=7),
             node("lost-but-cordoned", allocatable=7, cordoned=True), node("ok")]
    result = run_rule("COND-1", view({N: nodes}))
    assert [f.objects for f in result.findings] == [("Node/xid",), ("Node/lost",)]


def test_a_node_with_a_malformed_condition_time_is_named_with_the_condition() -> None:
    """One bad time on one node: that node and that condition (and its text) are named, the
    rest of the fleet is read as usual."""
    bad = node("gpu-bad")
    bad["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-09-21T05:53:30Z"},
        {"type": "GpuFallenOffBus", "status": "True", "lastTransitionTime": "yesterday",
         "lastHeartbeatTime": "2026-09-21T05:53:30Z"},
    ]  # fmt: skip
    good = node("gpu-good")
    good["status"]["conditions"] = [{"type": "Ready", "status": "True",
                                     "lastTransitionTime": "2026-09-21T05:53:30+02:00"}]
    result = run_rule("COND-2", view({N: [bad, good, node("no-times")]}))
    [finding] = result.findings
    assert finding.objects == ("Node/gpu-bad",)
    assert finding.severity is Severity.MEDIUM
    assert finding.evidence == (
        "condition time not an RFC 3339 time: GpuFallenOffBus lastTransitionTime 'yesterday'"
    )


def test_gpus_gpuguard_isolated_on_purpose_are_not_missing() -> None:
    entry = gpu_isolation.IsolatedGpu("GPU-3", "0000:1b:00.0", "3", AT, "xid-48", capacity=8)
    isolated = gpu_isolation.to_annotation((entry,))
    assert isolated is not None
    out = node("iso", allocatable=7, annotations={annotation_keys.GPU_ISOLATED: isolated})
    assert run_rule("COND-1", view({N: [out]})).status is RuleStatus.NO_FINDING


def test_no_spare_node_in_a_pool_is_info() -> None:
    nodes = [node(f"gpu-{i}") for i in range(4)]
    busy = [pod(f"job-{i}", node_name=f"gpu-{i}") for i in range(4)]
    [finding] = run_rule("SPARE-1", view({N: nodes, P: busy})).findings
    assert finding.severity is Severity.INFO
    assert "0 of 4" in finding.evidence
    spare = run_rule("SPARE-1", view({N: nodes, P: busy[:3]}))
    assert spare.status is RuleStatus.NO_FINDING


def test_driver_drift_in_a_pool_and_a_restarting_device_plugin() -> None:
    drv = "nvidia.com/cuda.driver-version.full"
    nodes = [node("a", labels={drv: "580.95.05"}), node("b", labels={drv: "580.126.09"})]
    plugin = pod("nvidia-device-plugin-daemonset-x", namespace="gpu-operator", gpus=0,
                 node_name="a", status={"phase": "Running", "containerStatuses": [
                     {"name": "p", "restartCount": 269}]})
    result = run_rule("UPG-1", view({N: nodes, P: [plugin]}))
    texts = [f.evidence for f in result.findings]
    assert any("2 driver versions" in t for t in texts)
    assert any("269 restarts" in t for t in texts)


def test_gpu_operator_upgrade_blocked_by_cordoned_nodes_names_gpuguards_share() -> None:
    isolated = {"gpuguard.io/isolated-at": "2026-11-30T10:00:00Z"}
    nodes = [node("a", cordoned=True, annotations=isolated), node("b", cordoned=True),
             *(node(f"n{i}") for i in range(6))]
    policy = {"metadata": {"name": "cluster-policy"},
              "spec": {"driver": {"upgradePolicy": {"maxUnavailable": "25%"}}}}
    [finding] = run_rule("GPUOP-1", view({N: nodes, Input.CLUSTER_POLICIES: [policy]})).findings
    assert "maxUnavailable = 2" in finding.evidence
    assert "1 of them cordoned by gpuguard" in finding.evidence  # the person's cordon is not
    without = run_rule("GPUOP-1", view({N: nodes}))
    assert without.status is RuleStatus.NOT_CHECKED


def karpenter(gates: str) -> dict[str, object]:
    container = {"name": "controller", "env": [{"name": "FEATURE_GATES", "value": gates}]}
    return {"metadata": {"name": "karpenter", "namespace": "kube-system"},
            "spec": {"template": {"spec": {"containers": [container]}}}}


def test_node_repair_on_gpu_nodes_whose_hardware_condition_is_false() -> None:
    bad = node("gpu-1", conditions={"AcceleratedHardwareReady": "False"})
    claims = [{"metadata": {"name": f"c{i}", "creationTimestamp":
                            (AT - timedelta(minutes=10 * i)).strftime("%Y-%m-%dT%H:%M:%SZ")}}
              for i in range(4)]
    on = view({N: [bad], Input.DEPLOYMENTS: [karpenter("NodeRepair=true")],
               Input.NODECLAIMS: claims})
    assert [f.severity for f in run_rule("REPAIR-1", on).findings] == [Severity.HIGH] * 2
    off = view({N: [bad], Input.DEPLOYMENTS: [karpenter("NodeRepair=false")]})
    assert run_rule("REPAIR-1", off).status is RuleStatus.NO_FINDING


def test_withheld_fault_is_reported_until_gpuguard_isolates_it() -> None:
    mark = json.dumps({"reason": "breaker-rate", "since": "2026-03-01T10:00:00Z",
                       "fault": "xid-79"})
    held = node("gpu-1", annotations={annotation_keys.WITHHELD: mark})
    [finding] = run_rule("GG-1", view({N: [held, node("gpu-2")]})).findings
    assert "xid-79" in finding.evidence


def test_a_rule_whose_input_is_missing_is_not_checked_never_passed() -> None:
    result = run_rule("SPARE-1", view({N: [node("a")]}, missing={P: "listing Pods: 403"}))
    assert result.status is RuleStatus.NOT_CHECKED
    assert result.findings == ()
    assert "403" in result.why
