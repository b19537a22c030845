"""GPU-stack and system-pod rules of the audit: dcgm-exporter coverage, Xid alerts on the
last-Xid gauge, device-plugin versions and health checks, kube-proxy skew and mode, CoreDNS."""

from __future__ import annotations

from gpuguard.model.audit import Input, PromRule, RuleStatus, Severity
from tests.audit_builders import node, pod, run_rule, system_pod, view

N, P = Input.NODES, Input.PODS
GAUGE_RATE = PromRule("gpu", "GpuXid", "increase(DCGM_FI_DEV_XID_ERRORS[10m]) > 0")
COUNTED = PromRule("gpu", "GpuXidCount", "sum by (Hostname) (DCGM_EXP_XID_ERRORS_COUNT) > 0")


def test_gpu_node_without_a_ready_exporter_or_its_series() -> None:
    nodes = [node("a"), node("b"), node("c")]
    exporters = [system_pod("nvidia-dcgm-exporter-1", "a", "dcgm-exporter:4.2"),
                 system_pod("nvidia-dcgm-exporter-2", "b", "dcgm-exporter:4.2", ready=False),
                 system_pod("nvidia-dcgm-exporter-3", "c", "dcgm-exporter:4.2")]
    reporting = {Input.PROM_DCGM_NODES: frozenset({"a", "b"})}
    result = run_rule("DCGM-1", view({N: nodes, P: exporters}, prom_nodes=reporting))
    assert {f.objects[0]: f.evidence.split(":")[0] for f in result.findings} == {
        "Node/b": "no Ready dcgm-exporter pod",
        "Node/c": "its Ready dcgm-exporter answers with zero GPUs (no series in Prometheus"}


def test_dcgm_fields_not_collected_are_named_with_what_goes_blind() -> None:
    defaults_only = frozenset({"DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_GPU_UTIL"})
    findings = run_rule("DCGM-3", view(series=defaults_only)).findings
    by_field = {f.objects[0]: f.evidence for f in findings}
    assert "Prometheus/DCGM_FI_DEV_XID_ERRORS" not in by_field
    pstate = by_field["Prometheus/DCGM_FI_DEV_PSTATE"]
    assert "not in dcgm-exporter default counters" in pstate
    assert "phantom" in pstate
    assert all(f.severity is Severity.MEDIUM for f in findings)


def test_dcgm_fields_without_any_dcgm_series_is_not_checked() -> None:
    assert run_rule("DCGM-3", view(series=frozenset())).status is RuleStatus.NOT_CHECKED


def test_dcgm_coverage_with_nothing_to_read_is_not_checked() -> None:
    assert run_rule("DCGM-1", view({N: [node("a")], P: []})).status is RuleStatus.NOT_CHECKED


def test_increase_on_the_last_xid_gauge_without_the_count_metric_is_high() -> None:
    [finding] = run_rule("DCGM-2", view(rules=(GAUGE_RATE,))).findings
    assert finding.severity is Severity.HIGH
    assert finding.objects == ("PrometheusRule/gpu/GpuXid",)
    counted = run_rule("DCGM-2", view(rules=(GAUGE_RATE,),
                                      series=frozenset({"DCGM_EXP_XID_ERRORS_COUNT"})))
    assert [f.severity for f in counted.findings] == [Severity.MEDIUM]


def test_xid_alerts_on_the_count_are_fine_and_no_xid_alert_at_all_is_not() -> None:
    assert run_rule("DCGM-2", view(rules=(COUNTED,))).status is RuleStatus.NO_FINDING
    [finding] = run_rule("DCGM-2", view(rules=())).findings
    assert "no Xid is alerted" in finding.evidence


def test_device_plugin_in_the_affected_range() -> None:
    plugins = [system_pod("nvidia-device-plugin-daemonset-a", "a",
                          "nvcr.io/nvidia/k8s-device-plugin:v0.18.1"),
               system_pod("nvidia-device-plugin-daemonset-b", "b",
                          "nvcr.io/nvidia/k8s-device-plugin:v0.21.0")]
    [finding] = run_rule("DP-1", view({P: plugins})).findings
    assert finding.objects == ("Pod/gpu-operator/nvidia-device-plugin-daemonset-a",)
    assert finding.severity is Severity.MEDIUM


def test_admission_errors_from_get_preferred_allocation_are_high() -> None:
    rejected = pod("train-7", node_name="gpu-3", status={
        "phase": "Failed", "reason": "UnexpectedAdmissionError",
        "message": "Allocate failed: GetPreferredAllocation failed: nvml: GPU is lost"})
    unversioned = system_pod("nvidia-device-plugin-daemonset-a", "gpu-3", "device-plugin")
    [finding] = run_rule("DP-1", view({P: [rejected, unversioned]})).findings
    assert finding.severity is Severity.HIGH
    assert finding.objects[:2] == ("Node/gpu-3", "Pod/ml/train-7")


def test_device_plugin_without_version_or_errors_is_not_checked() -> None:
    unversioned = system_pod("nvidia-device-plugin-daemonset-a", "a", "device-plugin")
    result = run_rule("DP-1", view({P: [unversioned]}))
    assert result.status is RuleStatus.NOT_CHECKED
    assert "no version" in result.why


def test_device_plugin_health_checks_off() -> None:
    off = system_pod("nvidia-device-plugin-daemonset-a", "a", "dp:v0.17.1",
                     env={"DP_DISABLE_HEALTHCHECKS": "all"})
    on = system_pod("nvidia-device-plugin-daemonset-b", "b", "dp:v0.17.1")
    result = run_rule("DP-2", view({P: [off, on]}))
    assert [f.objects for f in result.findings] == [("Pod/gpu-operator/"
                                                      "nvidia-device-plugin-daemonset-a",)]


def test_kube_proxy_newer_than_the_api_server() -> None:
    proxy = system_pod("kube-proxy-gpu-1", "gpu-1", "rancher/hardened-kubernetes:v1.35.7-rke2r1",
                       namespace="kube-system")
    [finding] = run_rule("SKEW-2", view({P: [proxy]}, version="v1.34.3+rke2r1")).findings
    assert "newer than the API server" in finding.evidence


def test_kube_proxy_in_ipvs_mode_and_one_not_ready() -> None:
    config = {"metadata": {"name": "kube-proxy", "namespace": "kube-system"},
              "data": {"config.conf": "apiVersion: v1\nmode: ipvs\n"}}
    down = system_pod("kube-proxy-gpu-2", "gpu-2", "kube-proxy:v1.34.3",
                      namespace="kube-system", ready=False)
    result = run_rule("IPVS-1", view({P: [down], Input.CONFIGMAPS: [config]}))
    assert sorted(f.severity for f in result.findings) == [Severity.HIGH, Severity.MEDIUM]


def test_coredns_forward_without_sequential_policy() -> None:
    def corefile(text: str) -> dict[str, object]:
        return {"metadata": {"name": "coredns", "namespace": "kube-system"},
                "data": {"Corefile": text}}

    random = corefile(".:53 {\n  forward . /etc/resolv.conf\n}\n")
    sequential = corefile(".:53 {\n  forward . /etc/resolv.conf {\n policy sequential\n }\n}\n")
    assert len(run_rule("DNS-1", view({Input.CONFIGMAPS: [random]})).findings) == 1
    assert run_rule("DNS-1", view({Input.CONFIGMAPS: [sequential]})).findings == ()
    assert run_rule("DNS-1", view({Input.CONFIGMAPS: []})).status is RuleStatus.NOT_CHECKED


def test_tags_that_are_not_versions_are_not_read_as_versions() -> None:
    dated = system_pod("kube-proxy-gpu-3", "gpu-3", "mirror/kube-proxy:2024.01",
                       namespace="kube-system")
    latest = system_pod("nvidia-device-plugin-daemonset-c", "gpu-3", "dp:latest")
    assert run_rule("SKEW-2", view({P: [dated]})).status is RuleStatus.NOT_CHECKED
    assert run_rule("DP-1", view({P: [latest]})).status is RuleStatus.NOT_CHECKED
