"""The chart's objects and gpuguard's Jobs are valid Kubernetes objects (kubernetes-validate's
bundled OpenAPI schemas, strict: no unknown field, offline), for the oldest Kubernetes the
chart supports (ValidatingAdmissionPolicy v1: 1.30) and the newest schema bundled. The same
schemas check that the Job admission policy is a complete allow-list: every field a pod, a
container or their security contexts can have is either pinned or refused by a rule."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from tests import admission, chart

OLDEST = "1.30.0"
VERSIONS = (OLDEST, kubernetes_validate.latest_version())
CRDS = {"monitoring.coreos.com/v1"}  # the PrometheusRule: a CRD, checked by promtool instead


def opt_in_values(option: str) -> dict[str, Any]:
    values = chart.defaults()
    values["agent"][option] = {"enabled": True, "privileged": True} if option in {
        "kmsg", "processScan", "podResources", "gpuState"} else True
    values["networkPolicy"]["enabled"] = False
    return values


def objects() -> list[dict[str, Any]]:
    plugins = chart.defaults()
    plugins["devicePlugin"]["enabled"] = True
    rendered = chart.all_objects() + [
        daemonset for option in ("kmsg", "processScan", "runAsRoot", "podResources", "gpuState")
        for daemonset in chart.render("agent.yaml", opt_in_values(option))
    ] + chart.render("device-plugin.yaml", plugins) + [
        obj for template in ("xid-overrides.yaml", "controller.yaml", "agent.yaml")
        for obj in chart.render(template, chart.with_xid_overrides())
        if obj["kind"] in {"ConfigMap", "Deployment", "DaemonSet"} and "xid-overrides" in str(obj)
    ]
    jobs = [admission.evidence(), admission.burnin(), admission.gpu_burnin()]
    return [*rendered, *jobs, *(admission.pod_of(job) for job in jobs),
            admission.controller_pod()]


def _id(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{obj['kind']}/{meta.get('name') or meta.get('generateName')}"


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("obj", objects(), ids=_id)
def test_every_object_is_valid_for_the_kubernetes_api(obj: dict[str, Any], version: str) -> None:
    assert obj["apiVersion"] not in CRDS
    kubernetes_validate.validate(obj, version, strict=True)


def test_the_schemas_are_bundled_not_downloaded() -> None:
    bundled = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    assert (bundled / f"v{OLDEST}-local-strict" / "podspec-v1.json").is_file()


@cache
def definitions() -> dict[str, Any]:
    latest = kubernetes_validate.latest_version()
    path = (Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
            / f"v{latest}-local-strict" / "_definitions.json")
    found: dict[str, Any] = json.loads(path.read_text())["$defs"]
    return found


ALLOWED_AS_IS = {
    # set by admission plugins or defaulting, harmless to what runs: scheduling and pulling
    "PodSpec": {"containers", "priority", "priorityClassName", "preemptionPolicy",
                "enableServiceLinks", "terminationGracePeriodSeconds", "imagePullSecrets",
                "overhead", "serviceAccount"},
    "Container": {"imagePullPolicy"},
    "SecurityContext": set(),
    "PodSecurityContext": set(),
    "VolumeMount": {"name", "recursiveReadOnly"},
}
WHERE = {"PodSpec": "variables.pod", "Container": "variables.c", "SecurityContext": "variables.sc",
         "PodSecurityContext": "variables.pod.securityContext", "VolumeMount": "m"}


@pytest.mark.parametrize("kind", WHERE)
def test_the_job_policy_pins_or_refuses_every_field(kind: str) -> None:
    policy = chart.by_name("ValidatingAdmissionPolicy", "gpuguard-jobs")
    spec = policy["spec"]
    text = " ".join(v["expression"] for v in spec["variables"] + spec["validations"])
    fields = definitions()[f"io.k8s.api.core.v1.{kind}"]["properties"]
    named = {f for f in fields if re.search(rf"{re.escape(WHERE[kind])}\.{f}\b", text)}
    assert set(fields) - named - ALLOWED_AS_IS[kind] == set(), "neither pinned nor refused"
