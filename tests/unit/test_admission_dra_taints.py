"""The DeviceTaintRule policy, evaluated (cel-python): gpuguard's token writes only the one
rule shape the controller builds (one gpu.nvidia.com device, gpuguard's taint key, the card's
uuid), and nobody else creates, changes or deletes gpuguard's rules
(deploy/helm/gpuguard/templates/admission-dra-taints.yaml; docs/security.md)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from gpuguard.model import annotation_keys, fleet, gpu_isolation
from gpuguard.policy import gpu_route
from tests import admission, cel, chart

GPUGUARD = "system:serviceaccount:gpuguard:gpuguard"
PERSON = "oidc:sre@example.com"
CARD = "GPU-0a8e0faa-d59d-595d-bf96-0adbb520ef6b"
NOW = datetime(2026, 8, 10, 16, 0, tzinfo=UTC)
Obj = dict[str, Any]


def published(device: str = "gpu-1") -> Obj:
    """A ResourceSlice as NVIDIA's DRA driver publishes it (a device with a uuid attribute)."""
    return {"metadata": {"name": "gpu-node-a-gpu.nvidia.com"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": "gpu-node-a",
                     "pool": {"name": "gpu-node-a", "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": device, "attributes": {"uuid": {"string": CARD}}}]}}


def sent(
    device: str = "gpu-1", have: list[Obj] | None = None,
    effect: gpu_route.Effect = gpu_route.Effect.NO_SCHEDULE,
) -> gpu_route.TaintChange:
    """The one write the controller's reconcile makes for GPU 1 isolated on gpu-node-a."""
    entry = gpu_isolation.IsolatedGpu(CARD, "0000:41:00.0", "1", NOW, "xid-48", capacity=4)
    marks = gpu_isolation.to_annotation((entry,))
    assert marks is not None
    node = fleet.Node("gpu-node-a", "boot-1", 4, 4,
                      annotations={annotation_keys.GPU_ISOLATED: marks})
    devices = gpu_route.slice_devices([published(device)])
    (change,) = gpu_route.reconcile([node], devices, have or [], effect)
    return change


def rule() -> Obj:
    created = sent().rule
    assert created is not None
    return created


def stored(obj: Obj) -> Obj:
    """What the API server keeps: server fields added (timeAdded defaulted)."""
    kept = copy.deepcopy(obj)
    kept["metadata"].update(resourceVersion="7", uid="4c1d",
                            creationTimestamp="2026-08-10T16:00:00Z")
    kept["spec"]["taint"].setdefault("timeAdded", "2026-08-10T16:00:00Z")
    return kept


def changed(path: str, value: object) -> Obj:
    """gpuguard's rule with one field set (``a.b.c``; None removes it)."""
    obj = rule()
    *parents, last = path.split(".")
    node = obj
    for part in parents:
        node = node[part]
    if value is None:
        del node[last]
    else:
        node[last] = value
    return obj


def foreign(name: str = "vendor-maintenance-gpu-node-a") -> Obj:
    """Someone else's rule: a whole pool tainted for maintenance."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
            "metadata": {"name": name},
            "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": "gpu-node-a"},
                     "taint": {"key": "example.com/maintenance", "effect": "NoSchedule"}}}


def refused_by(obj: Obj | None, *, user: str, operation: str = "CREATE",
               old: Obj | None = None) -> list[str]:
    policy = admission.policy("gpuguard-dra-taints")
    return cel.rule_names(cel.refusals(policy, obj, old=old, username=user, operation=operation))


def test_every_write_the_controller_makes_is_admitted() -> None:
    created = rule()
    assert refused_by(created, user=GPUGUARD) == []
    noexecute = sent(effect=gpu_route.Effect.NO_EXECUTE).rule
    assert refused_by(noexecute, user=GPUGUARD) == []
    beta = {**created, "apiVersion": "resource.k8s.io/v1beta2"}
    assert refused_by(beta, user=GPUGUARD) == []
    moved = sent("gpu-5", have=[stored(created)])  # the driver renamed the device
    assert moved.rule is not None
    assert moved.current is not None
    assert refused_by(moved.rule, old=moved.current, user=GPUGUARD, operation="UPDATE") == []
    (undo,) = gpu_route.reconcile([], [], [stored(created)])
    assert undo.rule is None
    assert refused_by(None, old=undo.current, user=GPUGUARD, operation="DELETE") == []


def test_people_keep_their_own_rules() -> None:
    assert refused_by(foreign(), user=PERSON) == []
    assert refused_by(None, old=foreign(), user=PERSON, operation="DELETE") == []


HOSTILE_TOKEN = [  # a stolen gpuguard token
    ("taints-a-whole-pool", changed("spec.deviceSelector.device", None), ["dra-taint-one-device"]),
    ("taints-another-driver", changed("spec.deviceSelector.driver", "net.example.com"),
     ["dra-taint-one-device"]),
    ("selects-by-device-class", changed("spec.deviceSelector.deviceClassName", "gpu.nvidia.com"),
     ["dra-taint-one-device"]),
    ("selects-by-cel", changed("spec.deviceSelector.selectors",
                               [{"cel": {"expression": "true"}}]), ["dra-taint-one-device"]),
    ("device-name-is-not-a-name", changed("spec.deviceSelector.device", "*"),
     ["dra-taint-one-device"]),
    ("empty-pool", changed("spec.deviceSelector.pool", ""), ["dra-taint-one-device"]),
    ("another-taint-key", changed("spec.taint.key", "example.com/maintenance"),
     ["dra-taint-shape"]),
    ("effect-none", changed("spec.taint.effect", "None"), ["dra-taint-shape"]),
    ("value-not-a-uuid", changed("spec.taint.value", "any"), ["dra-taint-shape"]),
    ("value-of-another-card", changed("spec.taint.value",
                                      "GPU-11111111-2222-3333-4444-555555555555"),
     ["dra-taint-shape"]),
    ("value-as-a-regex", changed("spec.taint.value", ".*"), ["dra-taint-shape"]),
    ("no-taint", changed("spec.taint", None), ["dra-taint-shape"]),
    ("extra-spec-field", changed("spec.extra", {}), ["dra-taint-one-device"]),
    ("unlabelled", changed("metadata.labels", None), ["dra-taint-own-rules"]),
    ("not-gpuguard-named", changed("metadata.name", "maint-" + CARD.lower()),
     ["dra-taint-own-rules"]),
]


@pytest.mark.parametrize(("name", "obj", "refused"), HOSTILE_TOKEN,
                         ids=[case[0] for case in HOSTILE_TOKEN])
def test_gpuguards_token_creates_only_its_own_rule_shape(
    name: str, obj: Obj, refused: list[str],
) -> None:
    assert refused_by(obj, user=GPUGUARD) == refused
    assert refused_by(obj, old=stored(rule()), user=GPUGUARD, operation="UPDATE") == refused


def test_gpuguards_token_deletes_and_updates_no_other_rule() -> None:
    assert refused_by(None, old=foreign(), user=GPUGUARD, operation="DELETE") == [
        "dra-taint-own-rules"]
    lifted = foreign()
    lifted["spec"]["taint"]["effect"] = "NoExecute"
    assert refused_by(lifted, old=foreign(), user=GPUGUARD, operation="UPDATE") == [
        "dra-taint-own-rules", "dra-taint-one-device", "dra-taint-shape"]


def test_nobody_else_forges_changes_or_lifts_gpuguards_taint() -> None:
    assert refused_by(rule(), user=PERSON) == ["dra-taint-owner"]  # forged
    weaker = changed("spec.taint.effect", "NoSchedule")
    weaker["spec"]["deviceSelector"]["device"] = "gpu-3"
    assert refused_by(weaker, old=stored(rule()), user=PERSON, operation="UPDATE") == [
        "dra-taint-owner"]
    assert refused_by(None, old=stored(rule()), user=PERSON, operation="DELETE") == [
        "dra-taint-owner"]
    unlabelled = changed("metadata.labels", None)
    assert refused_by(unlabelled, old=stored(rule()), user=PERSON, operation="UPDATE") == [
        "dra-taint-owner"]
    disguised = foreign("maintenance")
    disguised["metadata"]["labels"] = {"app.kubernetes.io/part-of": "gpuguard"}
    assert refused_by(disguised, user=PERSON) == ["dra-taint-owner"]


def test_the_policy_fails_closed_on_every_write_of_either_api_version() -> None:
    name = "gpuguard-dra-taints"
    binding = chart.by_name("ValidatingAdmissionPolicyBinding", name)
    assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}
    spec = admission.policy(name)["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["matchPolicy"] == "Equivalent"
    (rules,) = spec["matchConstraints"]["resourceRules"]
    assert rules == {"apiGroups": ["resource.k8s.io"], "apiVersions": ["v1", "v1beta2"],
                     "operations": ["CREATE", "UPDATE", "DELETE"],
                     "resources": ["devicetaintrules"]}
    assert {v.split("/")[1] for v in gpu_route.API_VERSIONS} == set(rules["apiVersions"])
