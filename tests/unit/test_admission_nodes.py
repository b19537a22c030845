"""The Node admission policy, evaluated (cel-python): gpuguard's own marks are written only by
gpuguard's service account, people keep their keys, and no one uncordons a node under a hold."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpuguard.model import annotation_keys as keys
from tests import cel, chart

GPUGUARD = "system:serviceaccount:gpuguard:gpuguard"
PERSON = "alice@example.com"
Obj = dict[str, Any]


def policy() -> Obj:
    return chart.by_name("ValidatingAdmissionPolicy", "gpuguard-node-marks")


def node(unschedulable: bool = False, **annotations: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "gpu-node-b", "annotations": dict(annotations)},
            "spec": {"unschedulable": True} if unschedulable else {}}


ISOLATED = {keys.ISOLATED_AT: "2026-09-21T06:05:10Z", keys.REASON: "xid-79",
            keys.BOOT_ID: "boot-1", keys.GPU_CAPACITY: "8", keys.GPU_UUID: "GPU-1",
            keys.GPU_PCI: "0000:99:00.0"}


def update(old: Obj, user: str, change: Any) -> list[str]:
    new = copy.deepcopy(old)
    change(new)
    refused = cel.refusals(policy(), new, old=old, username=user, operation="UPDATE")
    return cel.rule_names(refused)


def annotate(**values: str | None) -> Any:
    def apply(n: Obj) -> None:
        for key, value in values.items():
            name = "gpuguard.io/" + key.replace("_", "-")
            if value is None:
                n["metadata"]["annotations"].pop(name, None)
            else:
                n["metadata"]["annotations"][name] = value
    return apply


def cordon(on: bool) -> Any:
    def apply(n: Obj) -> None:
        if on:
            n["spec"]["unschedulable"] = True
        else:
            n["spec"].pop("unschedulable", None)
    return apply


def both(*changes: Any) -> Any:
    def apply(n: Obj) -> None:
        for change in changes:
            change(n)
    return apply


ISOLATE = both(cordon(True), annotate(isolated_at="2026-09-21T06:05:10Z", reason="xid-79",
                                      boot_id="boot-1", gpu_uuid="GPU-1"))


@pytest.mark.parametrize(("name", "old", "user", "change", "refused_by"), [
    ("gpuguard-isolates", node(), GPUGUARD, ISOLATE, []),
    ("gpuguard-records-its-verdict", node(True, **ISOLATED), GPUGUARD,
     annotate(verdict="power-cycle"), []),
    ("gpuguard-returns-the-node", node(True, **ISOLATED), GPUGUARD,
     both(cordon(False), annotate(**{k.removeprefix("gpuguard.io/").replace("-", "_"): None
                                     for k in ISOLATED})), []),
    ("person-forges-an-isolation", node(True), PERSON,
     annotate(isolated_at="2026-09-21T06:05:10Z", verdict="power-cycle", gpu_uuid="GPU-9"),
     ["node-marks"]),
    ("person-changes-the-verdict", node(True, **ISOLATED), PERSON,
     annotate(verdict="gpu-reset"), ["node-marks"]),
    ("person-removes-gpuguards-marks", node(True, **ISOLATED), PERSON,
     annotate(isolated_at=None), ["node-marks"]),
    ("person-sets-a-hold", node(True, **ISOLATED), PERSON, annotate(hold="rma ticket 4411"), []),
    ("person-marks-reset-done", node(True, **ISOLATED), PERSON,
     annotate(reset_done="2026-09-21T09:00:00Z"), []),
    ("person-marks-inspected", node(True, **ISOLATED), PERSON,
     annotate(inspected="2026-09-21T09:00:00Z"), []),
    ("person-uncordons-under-a-hold", node(True, **{keys.HOLD: "rma"}), PERSON, cordon(False),
     ["hold"]),
    ("gpuguard-uncordons-under-a-hold", node(True, **ISOLATED, **{keys.HOLD: "rma"}), GPUGUARD,
     cordon(False), ["hold"]),
    ("person-releases-the-hold-then-uncordons", node(True, **{keys.HOLD: "rma"}), PERSON,
     both(annotate(hold=None), cordon(False)), []),
    ("person-uncordons-without-a-hold", node(True, **ISOLATED), PERSON, cordon(False), []),
    ("person-cordons-with-a-reason-of-their-own", node(), PERSON,
     both(cordon(True), annotate(hold="investigating")), []),
    ("kubelet-updates-other-annotations", node(True, **ISOLATED), "system:node:gpu-node-b",
     lambda n: n["metadata"]["annotations"].update({"volumes.kubernetes.io/x": "true"}), []),
])
def test_node_updates_by_people_and_by_gpuguard(
    name: str, old: Obj, user: str, change: Any, refused_by: list[str]
) -> None:
    assert update(old, user, change) == refused_by


def test_the_hold_message_says_how_to_release_it() -> None:
    (hold,) = [v for v in policy()["spec"]["validations"] if v["message"].startswith("hold:")]
    assert "gpuguard.io/hold-" in hold["message"]


def test_every_key_gpuguard_writes_is_protected_and_the_peoples_are_not() -> None:
    people = {keys.HOLD, keys.RESET_DONE, keys.INSPECTED, keys.GATE_REPORT}
    own = [getattr(keys, n) for n in dir(keys) if n.isupper() and isinstance(getattr(keys, n), str)
           and getattr(keys, n).startswith(keys.PREFIX) and getattr(keys, n) not in people
           and getattr(keys, n) != keys.PREFIX]
    for key in own:
        new = node(True, **{key: "forged"})
        refused = cel.refusals(policy(), new, old=node(True), username=PERSON, operation="UPDATE")
        assert cel.rule_names(refused) == ["node-marks"], key
