"""The Helm chart, rendered with its default values by a small renderer that understands
exactly the template constructs the chart uses (helm itself is not installed here): every
object is valid YAML with the fields Kubernetes requires, RBAC grants what the controller
does and nothing that drains, and the image the controller stamps on its Jobs is the one the
admission policy admits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

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
