"""Complete Kubernetes objects for the hostile suite: gpuguard's own (from the product's
builders and the chart) and the ones an attacker sends, each valid for the API server apart
from the policies (apiVersion, kind, name, namespace, a container with an image, a Job
template with restartPolicy Never)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from gpuguard.actuators import jobs
from gpuguard.model import annotation_keys as keys
from tests import admission, chart

Obj = dict[str, Any]
Change = Callable[[Obj], None]

NS = chart.NAMESPACE
NODE = admission.NODE
GPUGUARD = admission.GPUGUARD
POD_TOKEN = admission.GPUGUARD_POD_TOKEN
AGENT = "system:serviceaccount:gpuguard:gpuguard-agent"
AGENT_TOKEN = {
    "authentication.kubernetes.io/pod-name": ["gpuguard-agent-x2k4p"],
    "authentication.kubernetes.io/pod-uid": ["9d3e1b7a-2c4f-4e6a-8b1d-5f7e9a0c2b4d"],
    "authentication.kubernetes.io/node-name": [NODE],
}
EDITOR = "oidc:dev@example.com"  # holds the built-in `edit` role in gpuguard's namespace
TENANT_SA = "system:serviceaccount:team-a:trainer"
PERSON = "oidc:sre@example.com"  # may patch and delete nodes
KUBELET = f"system:node:{NODE}"
OTHER_KUBELET = "system:node:gpu-node-c"
CARD = "GPU-0a8e0faa-d59d-595d-bf96-0adbb520ef6b"
IMAGE = admission.IMAGE
ISOLATED = {keys.ISOLATED_AT: "2026-09-21T06:05:10Z", keys.REASON: "xid-79",
            keys.BOOT_ID: "boot-1", keys.GPU_CAPACITY: "8", keys.GPU_UUID: CARD}


def changed(obj: Obj, *changes: Change) -> Obj:
    copied = copy.deepcopy(obj)
    for change in changes:
        change(copied)
    return copied


def pod(name: str, account: str, namespace: str = NS, **spec: Any) -> Obj:
    """A plain pod running ``account`` (no owner: made by hand)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"serviceAccountName": account, "restartPolicy": "Always",
                     "containers": [{"name": "main", "image": "busybox:1.36",
                                     "command": ["sleep", "infinity"]}], **spec}}


def job(name: str, pod_spec: Obj, labels: dict[str, str] | None = None) -> Obj:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": NS, **({"labels": labels} if labels else {})},
            "spec": {"backoffLimit": 0, "template": {
                "metadata": {"labels": labels or {}},
                "spec": {"restartPolicy": "Never", **pod_spec}}}}


def job_pod(job_obj: Obj) -> Obj:
    """The Job controller's pod of ``job_obj``, with its name."""
    made = admission.pod_of(job_obj)
    made["metadata"]["name"] = made["metadata"].pop("generateName") + "7xq2p"
    return made


def hand_made(made: Obj) -> Obj:
    """``made`` created by hand: no owner (or a forged one, the same to admission)."""
    return changed(made, lambda p: p["metadata"].pop("ownerReferences", None))


def gpu_isolation(action: str = "apply") -> Obj:
    return jobs.gpu_isolation_job(NODE, "k", action=action, uuids=(CARD,), image=IMAGE)


def node(unschedulable: bool = False, labels: dict[str, str] | None = None,
         annotations: dict[str, str] | None = None, name: str = NODE) -> Obj:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  "nvidia.com/gpu.present": "true",
                                                  **(labels or {})},
                         "annotations": dict(annotations or {})},
            "spec": {"unschedulable": True} if unschedulable else {}}


def owned_by_gpuguard(n: Obj) -> Obj:
    """The node as stored after gpuguard's merge patch: its managedFields entry."""
    return changed(n, lambda x: x["metadata"].update(managedFields=[
        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
         "time": "2026-09-21T05:00:00Z", "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:labels": {"f:kubernetes.io/hostname": {}}}}},
        {"manager": "gpuguard", "operation": "Update", "apiVersion": "v1",
         "time": "2026-09-21T06:05:10Z", "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:annotations": {
             f"f:{k}": {} for k in ISOLATED}}, "f:spec": {"f:unschedulable": {}}}}]))


def _put(mapping: dict[str, str], key: str, value: str | None) -> None:
    if value is None:
        mapping.pop(key, None)
    else:
        mapping[key] = value


def annotate(**marks: str | None) -> Change:
    """Set (None: remove) annotations; a bare name is gpuguard's (``gpu_isolated``)."""
    def key(name: str) -> str:
        return name if "/" in name else "gpuguard.io/" + name.replace("_", "-")
    return lambda n: [_put(n["metadata"]["annotations"], key(k), v) for k, v in marks.items()]


def label(**labels: str | None) -> Change:
    return lambda n: [_put(n["metadata"]["labels"], k, v) for k, v in labels.items()]


def cordon(on: bool) -> Change:
    def apply(n: Obj) -> None:
        n["spec"]["unschedulable"] = on
    return apply


def spec(**fields: Any) -> Change:
    return lambda n: n["spec"].update(fields)


def status_condition(kind: str, status: str = "True") -> Change:
    """Set the condition ``kind``, merged by type as a strategic-merge patch does."""
    def apply(n: Obj) -> None:
        conditions = n.setdefault("status", {}).setdefault("conditions", [])
        conditions[:] = [c for c in conditions if c["type"] != kind]
        conditions.append(
            {"type": kind, "status": status, "reason": "Agent", "message": "",
             "lastHeartbeatTime": "2026-09-21T06:05:10Z",
             "lastTransitionTime": "2026-09-21T06:05:10Z"})
    return apply


def lease(holder: str, name: str = "gpuguard-leader") -> Obj:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                     "acquireTime": "2026-09-21T06:00:00.000000Z",
                     "renewTime": "2026-09-21T06:05:10.000000Z", "leaseTransitions": 3}}


def config_map(name: str, labels: dict[str, str] | None = None) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NS, **({"labels": labels} if labels else {})},
            "data": {NODE: "2026-09-21T05:52:44Z xid-79 - - manual\n"}}


def token_request(account: str, bound_pod: str | None) -> Obj:
    bound = {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": bound_pod,
                                "uid": POD_TOKEN["authentication.kubernetes.io/pod-uid"][0]}
             } if bound_pod else {}
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "metadata": {"name": account, "namespace": NS},
            "spec": {"audiences": ["https://kubernetes.default.svc"],
                     "expirationSeconds": 86400, **bound}}


def token_secret(account: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
            "metadata": {"name": f"{account}-forever", "namespace": NS,
                         "annotations": {"kubernetes.io/service-account.name": account}}}


def connect(kind: str, container: str = "gpuguard") -> Obj:
    options: Obj = {"apiVersion": "v1", "kind": kind}
    if kind == "PodExecOptions":
        options.update(container=container, command=["sh"], stdin=True, stdout=True, tty=True)
    elif kind == "PodAttachOptions":
        options.update(container=container, stdin=True, stdout=True)
    else:
        options.update(ports=[9808])
    return options


def taint_rule(name: str, key: str = "gpuguard.io/gpu-isolated", value: str = CARD,
               labels: dict[str, str] | None = None) -> Obj:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
            "metadata": {"name": name, **({"labels": labels} if labels else {})},
            "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": "gpu-node-a",
                                        "device": "gpu-1"},
                     "taint": {"key": key, "value": value, "effect": "NoSchedule"}}}


def claim(toleration: Obj | None, first_available: bool = False) -> Obj:
    tolerations = [toleration] if toleration else []
    request: Obj = {"name": "gpu"}
    chosen = {"deviceClassName": "gpu.nvidia.com", **(
        {"tolerations": tolerations} if tolerations else {})}
    if first_available:
        request["firstAvailable"] = [{"name": "any", **chosen}]
    else:
        request["exactly"] = chosen
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "trainer-gpu", "namespace": "team-a"},
            "spec": {"devices": {"requests": [request]}}}


def claim_template(toleration: Obj) -> Obj:
    inner = claim(toleration)
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "trainer-gpu", "namespace": "team-a"},
            "spec": {"spec": inner["spec"]}}


ISOLATION_TOLERATION = {"key": "gpuguard.io/gpu-isolated", "operator": "Exists",
                        "effect": "NoSchedule"}
