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
from tests import cel, chart

GPUGUARD = "system:serviceaccount:gpuguard:gpuguard"
IMAGE = "ghcr.io/gpuguard/gpuguard:0.1.0"  # the chart's default image (values.yaml, appVersion)
NODE = "gpu-node-b"
Obj = dict[str, Any]


@functools.cache
def policy(name: str) -> Obj:
    return chart.by_name("ValidatingAdmissionPolicy", name)


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
                           runtime_class="nvidia", uuid=CARD)


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


def controller_pod(values: dict[str, Any] | None = None) -> Obj:
    """The Deployment's pod as the API server admits it: the ServiceAccount admission plugin
    has added the projected token volume, defaulting the rest."""
    (deployment,) = chart.by_kind("Deployment", values)
    spec = copy.deepcopy(deployment["spec"]["template"]["spec"])
    spec["volumes"].append({"name": "kube-api-access-x7k2q", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}]}})
    (container,) = spec["containers"]
    container["volumeMounts"].append({"name": "kube-api-access-x7k2q", "readOnly": True,
                                      "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"})
    spec.update(dnsPolicy="ClusterFirst", schedulerName="default-scheduler",
                tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                              "effect": "NoExecute", "tolerationSeconds": 300}])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gpuguard-5d8f-abcde"},
            "spec": spec}
