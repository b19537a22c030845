"""The chart's admission policies evaluated on an object (cel-python, ``tests/cel.py``) as the
API server would for a request by gpuguard's service account: which rules refuse it."""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

from typer.testing import CliRunner

from gpuguard.actuators import jobs
from gpuguard.cli.main import app
from gpuguard.model import settings
from tests import cel, chart

GPUGUARD = "system:serviceaccount:gpuguard:gpuguard"
CONTROLLER_POD = "gpuguard-5d8f7c9b4-x7k2q"
GPUGUARD_POD_TOKEN = {  # what the API server writes into the controller pod's bound token
    "authentication.kubernetes.io/pod-name": [CONTROLLER_POD],
    "authentication.kubernetes.io/pod-uid": ["3c7a51e2-6f0b-4d8e-9a51-2b7f0c4e8d11"],
    "authentication.kubernetes.io/node-name": ["cpu-node-a"],
    "authentication.kubernetes.io/credential-id": ["JTI=8f1c2d3e-4b5a-6978-8a9b-0c1d2e3f4a5b"],
}
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
DAEMONSET_CONTROLLER = "system:serviceaccount:kube-system:daemon-set-controller"
REPLICASET_CONTROLLER = "system:serviceaccount:kube-system:replicaset-controller"
IMAGE = "ghcr.io/gpuguard/gpuguard:0.1.0"  # the chart's default image (values.yaml, appVersion)
NODE = "gpu-node-b"
Obj = dict[str, Any]


@functools.cache
def policy(name: str) -> Obj:
    return chart.by_name("ValidatingAdmissionPolicy", name)


def policy_with(name: str, values: dict[str, Any]) -> Obj:
    """The policy as the chart renders it with ``values`` (an opt-in changes its rules)."""
    (found,) = [o for o in chart.by_kind("ValidatingAdmissionPolicy", values)
                if o["metadata"]["name"] == name]
    return found


def failed_rules(job: Obj) -> list[str]:
    """The rules of ``gpuguard-jobs`` that refuse a Job gpuguard creates."""
    refused = cel.refusals(policy("gpuguard-jobs"), job, username=GPUGUARD)
    return cel.rule_names(refused)


def manifest(*args: str) -> Obj:
    """The Job exactly as the controller would create it (the CLI prints the builder's)."""
    printed = CliRunner().invoke(app, ["manifest", "job", *args, "--node", NODE, "-o", "json"])
    assert printed.exit_code == 0, printed.output
    job: Obj = json.loads(printed.output)
    return job


def evidence() -> Obj:
    return manifest("evidence")


def burnin() -> Obj:
    return manifest("burnin", "--gpus", "8", "--reason", "xid-48")


CARD = "GPU-0a8e0faa-d59d-595d-bf96-0adbb520ef6b"


def gpu_burnin() -> Obj:
    """A returning GPU's own burn-in, as the GPU-isolation step creates it."""
    return jobs.burnin_job(NODE, "burnin/k", "boot", gpus=1, mode="matmul", image=IMAGE,
                           runtime_class="nvidia", uuid=CARD,
                           deadline=settings.DEFAULT_BURNIN_DEADLINE)


def gpu_reset() -> Obj:
    """The GPU-reset Job as the remediation step creates it (docs/remediation.md#gpu-reset)."""
    return jobs.gpu_reset_job(NODE, "2026-09-21T06:05:00Z", uuid=CARD, image=IMAGE)


def defaulted(job: Obj) -> Obj:
    """The Job after the API server's defaulting (SetDefaults_PodSpec, _Container, _Job)."""
    job = copy.deepcopy(job)
    # The Job's strategy also generates its selector and sets manualSelector false
    # (pkg/registry/batch/job/strategy.go; seen on the real API server, tests/realcluster).
    job["spec"].update(completions=1, parallelism=1, completionMode="NonIndexed",
                       suspend=False, podReplacementPolicy="TerminatingOrFailed",
                       manualSelector=False)
    pod = job["spec"]["template"]["spec"]
    pod.update(dnsPolicy="ClusterFirst", schedulerName="default-scheduler",
               terminationGracePeriodSeconds=30, enableServiceLinks=True,
               preemptionPolicy="PreemptLowerPriority", priority=0)
    for container in pod["containers"]:
        container.setdefault("imagePullPolicy", "IfNotPresent")
    for volume in pod.get("volumes", []):
        if "configMap" in volume:  # SetDefaults_ConfigMapVolumeSource: 0644
            volume["configMap"].setdefault("defaultMode", 0o644)
    return job


def pod_spec(job: Obj) -> Obj:
    """A Job's pod template spec, to change in place."""
    spec: Obj = job["spec"]["template"]["spec"]
    return spec


def container(job: Obj) -> Obj:
    """A Job's (first) container, to change in place."""
    found: Obj = pod_spec(job)["containers"][0]
    return found


def pod_of(job: Obj) -> Obj:
    """The Pod the Job controller creates from the Job's template (labels and owner added)."""
    template = copy.deepcopy(defaulted(job)["spec"]["template"])
    labels = {**template["metadata"]["labels"], "job-name": job["metadata"]["name"],
              "batch.kubernetes.io/job-name": job["metadata"]["name"],
              "controller-uid": "0f1e", "batch.kubernetes.io/controller-uid": "0f1e"}
    annotations = template["metadata"].get("annotations", {})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": job["metadata"]["name"] + "-", "labels": labels,
                         **({"annotations": annotations} if annotations else {}),
                         "namespace": "gpuguard", "ownerReferences": [
                             {"apiVersion": "batch/v1", "kind": "Job", "controller": True,
                              "name": job["metadata"]["name"], "uid": "0f1e"}]},
            "spec": template["spec"]}


def _owned(kind: str, name: str) -> list[Obj]:
    return [{"apiVersion": "apps/v1", "kind": kind, "name": name, "controller": True,
             "blockOwnerDeletion": True, "uid": "7b0c9d2e-1f3a-4b5c-8d6e-9f0a1b2c3d4e"}]


DAEMONSET_TOLERATIONS = [  # what the DaemonSet controller adds to every pod it makes
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
]


def daemonset_pod(daemonset: Obj, suffix: str = "x2k4p") -> Obj:
    """The pod the DaemonSet controller creates for one node: the template, its owner, the
    node affinity that places it (no nodeName: the scheduler binds it), the defaults."""
    template = copy.deepcopy(daemonset["spec"]["template"])
    spec = template["spec"]
    spec.update(dnsPolicy="ClusterFirst", schedulerName="default-scheduler",
                restartPolicy="Always", terminationGracePeriodSeconds=30,
                tolerations=spec.get("tolerations", []) + DAEMONSET_TOLERATIONS,
                affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}}})
    name = daemonset["metadata"]["name"]
    metadata = {"name": f"{name}-{suffix}", "namespace": chart.NAMESPACE,
                "labels": template["metadata"]["labels"],
                "ownerReferences": _owned("DaemonSet", name)}
    if "annotations" in template["metadata"]:
        metadata["annotations"] = template["metadata"]["annotations"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


@functools.cache
def _daemonsets(values_json: str) -> list[Obj]:
    values = json.loads(values_json)
    return [obj for template in ("agent.yaml", "device-plugin.yaml")
            for obj in chart.render(template, values) if obj["kind"] == "DaemonSet"]


def daemonsets(values: dict[str, Any] | None) -> list[Obj]:
    """The chart's DaemonSets with ``values`` (rendered once per distinct values)."""
    return _daemonsets(json.dumps(chart.defaults() if values is None else values,
                                  sort_keys=True))


def agent_pod(values: dict[str, Any] | None = None) -> Obj:
    """The agent's pod as the DaemonSet controller creates it."""
    (daemonset,) = [d for d in daemonsets(values) if d["metadata"]["name"] == "gpuguard-agent"]
    return daemonset_pod(daemonset)


def device_plugin_pods(values: dict[str, Any]) -> list[Obj]:
    """One pod of each per-node device plugin DaemonSet (devicePlugin.enabled)."""
    return [daemonset_pod(d) for d in daemonsets(values)
            if d["metadata"]["name"].startswith("gpuguard-device-plugin-")]


def controller_pod(values: dict[str, Any] | None = None) -> Obj:
    """The Deployment's pod as the API server admits it: the ServiceAccount admission plugin
    has added the projected token volume, defaulting the rest."""
    (deployment,) = [d for d in chart.render("controller.yaml", values)
                     if d["kind"] == "Deployment"]
    spec = copy.deepcopy(deployment["spec"]["template"]["spec"])
    spec["volumes"].append({"name": "kube-api-access-x7k2q", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
            "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}})
    (container,) = spec["containers"]
    container["volumeMounts"].append({"name": "kube-api-access-x7k2q", "readOnly": True,
                                      "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"})
    spec.update(dnsPolicy="ClusterFirst", schedulerName="default-scheduler",
                tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                              "effect": "NoExecute", "tolerationSeconds": 300}])
    spec.update(restartPolicy="Always", terminationGracePeriodSeconds=30)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": CONTROLLER_POD, "namespace": chart.NAMESPACE,
        "labels": deployment["spec"]["template"]["metadata"]["labels"],
        "ownerReferences": _owned("ReplicaSet", "gpuguard-5d8f7c9b4")}, "spec": spec}
