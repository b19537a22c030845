"""The Helm chart, rendered with its default values by a small renderer that understands
exactly the template constructs the chart uses (helm itself is not installed here): every
object is valid YAML with the fields Kubernetes requires, RBAC grants what the controller
does and nothing that drains, and the image the controller stamps on its Jobs is the one the
admission policy admits."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "gpuguard"
NAMESPACE = "gpuguard"


def _lookup(values: dict[str, Any], path: str) -> Any:
    node: Any = {
        "Values": values,
        "Release": {"Namespace": NAMESPACE, "Name": "gpuguard"},
        "Chart": yaml.safe_load((CHART / "Chart.yaml").read_text()),
    }
    for part in path.strip(".").split("."):
        node = node[{"AppVersion": "appVersion"}.get(part, part)]
    return node


def _expression(expr: str, values: dict[str, Any]) -> str:
    expr = expr.strip()
    if m := re.fullmatch(r"toYaml (\S+) \| nindent (\d+)", expr):
        dumped = yaml.safe_dump(_lookup(values, m[1]), sort_keys=False).rstrip("\n")
        pad = " " * int(m[2])
        return "\n" + "\n".join(pad + line for line in dumped.splitlines())
    if m := re.fullmatch(r"(\S+) \| default (\S+)", expr):
        return str(_lookup(values, m[1]) or _lookup(values, m[2]))
    if m := re.fullmatch(r"(\S+) \| quote", expr):
        return f'"{_lookup(values, m[1])}"'
    return str(_lookup(values, expr))


def render(name: str, values: dict[str, Any]) -> list[dict[str, Any]]:
    text = (CHART / "templates" / name).read_text()
    text = re.sub(r"\{\{-? /\*.*?\*/ -?\}\}\n?", "", text, flags=re.S)

    def conditional(m: re.Match[str]) -> str:
        return m[2] if _lookup(values, m[1]) else ""

    text = re.sub(r"\{\{- if (\S+) \}\}\n(.*?)\{\{- end \}\}\n?", conditional, text, flags=re.S)
    text = re.sub(r"\{\{-? (.*?) -?\}\}", lambda m: _expression(m[1], values), text)
    assert "{{" not in text, f"{name}: an unrendered template expression is left"
    return [doc for doc in yaml.safe_load_all(text) if doc]


def defaults() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return values


def all_objects() -> list[dict[str, Any]]:
    return [
        obj
        for path in sorted((CHART / "templates").glob("*.yaml"))
        if path.name != "prometheusrule.yaml"  # tested in test_rules.py
        for obj in render(path.name, defaults())
    ]


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


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [o for o in all_objects() if o["kind"] == kind]


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


def test_the_controller_stamps_jobs_with_the_image_the_admission_policy_admits() -> None:
    (deployment,) = by_kind("Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    (policy,) = by_kind("ValidatingAdmissionPolicy")
    image_rule = [
        v["expression"] for v in policy["spec"]["validations"] if "image" in v["expression"]
    ]
    assert env["GPUGUARD_CONTROLLER__IMAGE"] == container["image"]
    assert f"'{container['image']}'" in image_rule[0]
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
