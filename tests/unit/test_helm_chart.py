"""The Helm chart, rendered with its default values by a small renderer that understands
exactly the template constructs the chart uses (helm itself is not installed here): every
object is valid YAML with the fields Kubernetes requires, RBAC grants what the controller
does and nothing that drains, and the image the controller stamps on its Jobs is the one the
admission policy admits."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpuguard.actuators import jobs
from gpuguard.model import gpu_isolation
from tests import chart

NAMESPACE = chart.NAMESPACE
render, defaults, all_objects, by_kind = (
    chart.render, chart.defaults, chart.all_objects, chart.by_kind
)


@pytest.mark.parametrize("obj", all_objects(), ids=lambda o: f"{o['kind']}/{o['metadata']['name']}")
def test_every_object_has_what_kubernetes_requires(obj: dict[str, Any]) -> None:
    assert obj["apiVersion"]
    assert obj["metadata"]["name"]
    if obj["kind"] in {"Deployment", "DaemonSet"}:
        template = obj["spec"]["template"]
        assert (
            obj["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
        )
        for container in template["spec"]["containers"]:
            assert container["image"]
            assert container["resources"]["limits"]
            assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_rbac_allows_cordon_and_events_but_never_eviction_or_pod_deletion() -> None:
    rules = [r for role in by_kind("ClusterRole") + by_kind("Role") for r in role["rules"]]
    granted = {(res, verb) for r in rules for res in r["resources"] for verb in r["verbs"]}
    assert ("nodes", "patch") in granted
    assert ("events", "create") in granted
    assert ("leases", "update") in granted
    assert ("configmaps", "update") in granted
    assert ("jobs", "create") in granted
    assert not {
        g
        for g in granted
        if g[0] in {"pods/eviction", "pods"} and g[1] in {"create", "delete", "deletecollection"}
    }


def test_the_controller_stamps_jobs_with_what_the_admission_policy_admits() -> None:
    (deployment,) = by_kind("Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    policy = chart.by_name("ValidatingAdmissionPolicy", "gpuguard-jobs")
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert env["GPUGUARD_CONTROLLER__IMAGE"] == container["image"]
    assert variables["image"] == f"'{container['image']}'"
    assert variables["runtimeClass"] == f"'{env['GPUGUARD_CONTROLLER__JOB_RUNTIME_CLASS']}'"
    assert env["GPUGUARD_CONTROLLER__NAMESPACE"] == NAMESPACE


def test_settings_in_the_chart_are_valid_gpuguard_settings(tmp_path: Path) -> None:
    from gpuguard.model import settings

    (config_map,) = [
        o for o in by_kind("ConfigMap") if o["metadata"]["name"] == "gpuguard-settings"
    ]
    path = tmp_path / "settings.yaml"
    path.write_text(config_map["data"]["settings.yaml"])
    loaded = settings.GuardSettings.load(path)
    assert loaded.isolation.max_isolations_per_tick == 1


def test_the_agent_tolerates_the_onboarding_taint_and_keeps_its_state_on_the_host() -> None:
    (agent,) = by_kind("DaemonSet")
    spec = agent["spec"]["template"]["spec"]
    assert {"operator": "Exists"} in spec["tolerations"]
    state = [v for v in spec["volumes"] if v["name"] == "state"]
    assert state[0]["hostPath"]["path"] == "/var/lib/gpuguard"
    mounts = spec["containers"][0]["volumeMounts"]
    assert all(m.get("readOnly") for m in mounts if m["name"] != "state")


def test_disabling_the_agent_removes_it() -> None:
    values = defaults()
    values["agent"]["enabled"] = False
    assert render("agent.yaml", values) == []


def agent_pod(values: dict[str, Any] | None = None) -> dict[str, Any]:
    (agent,) = by_kind("DaemonSet", values) if values else by_kind("DaemonSet")
    spec: dict[str, Any] = agent["spec"]["template"]["spec"]
    return spec


def test_the_agent_runs_non_root_without_capabilities_or_a_runtime_socket() -> None:
    spec = agent_pod()
    (container,) = spec["containers"]
    context = container["securityContext"]
    assert (context["runAsUser"], context["runAsNonRoot"]) == (65532, True)
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["privileged"] is False
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    host_paths = {v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert not {p for p in host_paths if p in {"/run", "/var/run", "/dev/kmsg"}
                or "containerd" in p or p.endswith(".sock")}, host_paths
    assert "--journal" in container["args"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


def _agent_grants(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The rules of every ClusterRole bound to the agent's account."""
    roles = {r["metadata"]["name"]: r for r in by_kind("ClusterRole", values or defaults())}
    agent = {"kind": "ServiceAccount", "name": "gpuguard-agent", "namespace": chart.NAMESPACE}
    return [rule for b in by_kind("ClusterRoleBinding", values or defaults())
            if agent in b["subjects"] for rule in roles[b["roleRef"]["name"]]["rules"]]


def test_the_agent_token_is_short_lived_and_may_only_patch_node_status() -> None:
    """docs/design.md#fast-path: the agent's only API call is its Node's status conditions."""
    spec = agent_pod()
    assert spec["automountServiceAccountToken"] is False
    (token,) = [s["serviceAccountToken"] for v in spec["volumes"] if "projected" in v
                for s in v["projected"]["sources"] if "serviceAccountToken" in s]
    assert token == {"path": "token", "expirationSeconds": 600}
    (container,) = spec["containers"]
    assert "--report-conditions" in container["args"]
    assert _agent_grants() == [
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}]


def test_without_node_conditions_the_agent_has_no_token_and_no_grant() -> None:
    values = defaults()
    values["agent"]["nodeConditions"]["enabled"] = False
    spec = agent_pod(values)
    assert not [v for v in spec["volumes"] if "projected" in v]
    (container,) = spec["containers"]
    assert "--no-report-conditions" in container["args"]
    assert _agent_grants(values) == []


def test_the_kubelet_pod_resources_socket_is_mounted_only_when_asked() -> None:
    def pod_resources(spec: dict[str, Any]) -> list[str]:
        return [v["hostPath"]["path"] for v in spec["volumes"]
                if "kubelet" in v.get("hostPath", {}).get("path", "")]

    assert pod_resources(agent_pod()) == []
    values = defaults()
    values["agent"]["podResources"]["enabled"] = True
    spec = agent_pod(values)
    assert pod_resources(spec) == ["/var/lib/kubelet/pod-resources"]
    (container,) = spec["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "pod-resources"]
    assert mount["readOnly"] is True
    assert ("--pod-resources=" + mount["mountPath"] + "/kubelet.sock") in container["args"]


def test_kmsg_and_the_process_scan_are_explicit_opt_ins() -> None:
    values = defaults()
    values["agent"]["kmsg"]["privileged"] = True
    spec = agent_pod(values)
    (container,) = spec["containers"]
    assert container["securityContext"]["privileged"] is True
    assert "--kmsg" in container["args"]
    assert {"name": "kmsg", "hostPath": {"path": "/dev/kmsg", "type": "CharDevice"}} in spec[
        "volumes"]
    values = defaults()
    values["agent"]["processScan"]["enabled"] = True
    (container,) = agent_pod(values)["containers"]
    assert container["securityContext"]["capabilities"]["add"] == ["SYS_PTRACE"]
    values = defaults()
    values["agent"]["runAsRoot"] = True
    (container,) = agent_pod(values)["containers"]
    assert container["securityContext"]["runAsUser"] == 0
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    values = defaults()
    values["agent"]["kernelLogFile"] = "/var/log/kern.log"
    (container,) = agent_pod(values)["containers"]
    assert "--kernel-log=/host/var/log/kern.log" in container["args"]


def test_only_the_scrapers_reach_the_metrics_ports() -> None:
    policies = {p["metadata"]["name"]: p for p in by_kind("NetworkPolicy")}
    for name, port in (("gpuguard-agent-metrics", 9809), ("gpuguard-controller-metrics", 9808)):
        (rule,) = policies[name]["spec"]["ingress"]
        assert rule["ports"] == [{"protocol": "TCP", "port": port}]
        assert rule["from"] == defaults()["networkPolicy"]["scrapers"]


def test_every_host_path_and_capability_has_its_reason_in_the_security_doc() -> None:
    from tests.admission import evidence

    doc = (chart.CHART.parents[2] / "docs" / "security.md").read_text()
    values = defaults()
    values["agent"]["kmsg"]["privileged"] = True
    values["agent"]["processScan"]["enabled"] = True
    values["devicePlugin"]["enabled"] = True
    values["agent"]["podResources"]["enabled"] = True
    pods = [o["spec"]["template"]["spec"] for o in by_kind("DaemonSet", values)
            + by_kind("Deployment") + [evidence()]]
    paths = {v["hostPath"]["path"] for p in pods for v in p.get("volumes", []) if "hostPath" in v}
    capabilities = {cap for p in pods for c in p["containers"] + p.get("initContainers", [])
                    for cap in c.get("securityContext", {}).get("capabilities", {}).get("add", [])}
    assert paths
    assert capabilities
    missing = {x for x in paths | capabilities if f"`{x}`" not in doc}
    assert not missing, f"not explained in docs/security.md: {sorted(missing)}"


@pytest.mark.parametrize(
    ("template", "switch", "kinds"),
    [
        ("agent-podmonitor.yaml", "podMonitor", ["PodMonitor"]),
        ("agent-servicemonitor.yaml", "serviceMonitor", ["Service", "ServiceMonitor"]),
    ],
)
def test_the_agent_can_be_scraped_with_its_node_label_and_is_not_by_default(
    template: str, switch: str, kinds: list[str]
) -> None:
    values = defaults()
    assert render(template, values) == []  # optional: needs the Prometheus Operator's CRDs
    values["agent"]["scrape"][switch] = True
    objects = render(template, values)
    assert [o["kind"] for o in objects] == kinds
    (agent,) = [o for o in render("agent.yaml", values) if o["kind"] == "DaemonSet"]
    pod_labels = agent["spec"]["template"]["metadata"]["labels"]
    monitor = objects[-1]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    (endpoint,) = monitor["spec"].get("podMetricsEndpoints") or monitor["spec"]["endpoints"]
    port_names = [p["name"] for p in agent["spec"]["template"]["spec"]["containers"][0]["ports"]]
    assert endpoint["port"] in port_names or objects[0]["spec"]["ports"][0]["name"] == "metrics"
    assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"} in (
        endpoint["relabelings"])


def device_plugins(enabled: bool = True) -> list[dict[str, Any]]:
    values = defaults()
    values["devicePlugin"]["enabled"] = enabled
    return [o for o in render("device-plugin.yaml", values) if o["kind"] == "DaemonSet"]


def test_the_per_node_device_plugin_is_an_opt_in() -> None:
    assert device_plugins(enabled=False) == []
    assert render("device-plugin.yaml") == []


@pytest.mark.parametrize(("gpus", "isolated"), [(4, "1"), (8, "0"), (8, "7")])
def test_a_node_gpuguard_labels_for_one_isolated_gpu_gets_a_plugin_without_it(
    gpus: int, isolated: str
) -> None:
    card = gpu_isolation.IsolatedGpu("GPU-bad", "", isolated, datetime(2026, 1, 1, tzinfo=UTC),
                                     "xid-48", capacity=gpus)
    labels = gpu_isolation.plugin_labels((card,))
    (plugin,) = [d for d in device_plugins()
                 if d["spec"]["template"]["spec"]["nodeSelector"] == labels]
    (container,) = plugin["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    visible = env["NVIDIA_VISIBLE_DEVICES"].split(",")
    assert isolated not in visible
    assert len(visible) == gpus - 1
    assert env["DEVICE_ID_STRATEGY"] == "uuid"


def test_the_device_plugin_has_no_capability_no_token_and_only_the_kubelet_socket_dir() -> None:
    for plugin in device_plugins():
        pod = plugin["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert pod["automountServiceAccountToken"] is False
        assert [v["hostPath"]["path"] for v in pod["volumes"]] == [
            "/var/lib/kubelet/device-plugins"]


def test_declared_versions_reach_the_agent_through_a_refreshed_mount_not_a_token() -> None:
    values = chart.defaults()
    values["agent"]["declaredVersions"] = {"driver": "580.159.03", "kernel": "6.8.0-60-generic"}
    objects = chart.render("agent.yaml", values)
    (declared,) = [o for o in objects if o["kind"] == "ConfigMap"]
    assert declared["data"] == {"driver": "580.159.03", "kernel": "6.8.0-60-generic"}
    (agent,) = [o for o in objects if o["kind"] == "DaemonSet"]
    spec = agent["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    (volume,) = [v for v in spec["volumes"] if v.get("configMap")]
    assert volume["configMap"]["name"] == declared["metadata"]["name"]
    (container,) = spec["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert "subPath" not in mount  # a subPath mount is never refreshed by the kubelet
    assert f"--declared={mount['mountPath']}" in container["args"]
    # a new declaration changes the ConfigMap only: the pod template, so the agents, stay
    assert agent == next(o for o in chart.render("agent.yaml") if o["kind"] == "DaemonSet")


def _workloads(values: dict[str, Any]) -> list[dict[str, Any]]:
    """The controller's and the agent's templates' objects (no other template mounts the file)."""
    return render("controller.yaml", values) + render("agent.yaml", values)


def _pods(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o["spec"]["template"] for o in objects
            if o["kind"] in {"Deployment", "DaemonSet"}}


def test_the_xid_override_file_reaches_the_controller_and_the_agent_only_when_configured(
    tmp_path: Path,
) -> None:
    from gpuguard.catalog import overrides
    from gpuguard.model import settings, xid

    assert render("xid-overrides.yaml") == []
    assert "xid-overrides" not in str(_workloads(defaults()))
    values = chart.with_xid_overrides()
    workloads = _workloads(values)
    pods = _pods(workloads)
    (config_map,) = render("xid-overrides.yaml", values)
    (key,) = config_map["data"]
    text = config_map["data"][key]
    assert text == chart.XID_OVERRIDES  # the file as given (its comments too)
    assert overrides.parse_class_overrides(text, source=key) == {
        13: xid.XidClass.HARDWARE, 48: xid.XidClass.USER}
    files = set()
    for kind, template in pods.items():
        spec = template["spec"]
        (volume,) = [v for v in spec["volumes"] if v.get("configMap", {}).get("name")
                     == config_map["metadata"]["name"]]
        assert volume["configMap"]["items"] == [{"key": key, "path": key}]  # that key alone
        (container,) = spec["containers"]
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
        assert mount["readOnly"] is True
        assert "subPath" not in mount
        files.add(f"{mount['mountPath']}/{key}")
        assert template["metadata"]["annotations"]["checksum/xid-overrides"], kind
    (path,) = files  # one file, the same path in both pods
    (agent,) = pods["DaemonSet"]["spec"]["containers"]
    assert f"--xid-overrides={path}" in agent["args"]
    (controller,) = pods["Deployment"]["spec"]["containers"]
    environ = {e["name"]: e["value"] for e in controller["env"] if "value" in e}
    (settings_map,) = [o for o in workloads if o["metadata"]["name"] == "gpuguard-settings"]
    (tmp_path / "settings.yaml").write_text(settings_map["data"]["settings.yaml"])
    loaded = settings.GuardSettings.load(tmp_path / "settings.yaml", environ)
    assert loaded.controller.xid_overrides == Path(path)
    # the GPU-isolation Job the controller starts reads the same ConfigMap key at the same path
    job = jobs.gpu_isolation_job("n", "k", action="apply", uuids=("GPU-1",), image="i",
                                 xid_overrides=True)
    (job_volume,) = [v for v in job["spec"]["template"]["spec"]["volumes"] if "configMap" in v]
    assert job_volume["configMap"] == volume["configMap"]
    assert path == jobs.XID_OVERRIDES_FILE


def test_a_new_xid_override_file_restarts_the_controller_and_the_agents() -> None:
    before = _pods(_workloads(chart.with_xid_overrides()))
    after = _pods(_workloads(chart.with_xid_overrides("classes:\n  13: hardware\n")))
    for kind in ("Deployment", "DaemonSet"):  # both read the file at start only
        assert before[kind]["metadata"] != after[kind]["metadata"], kind
