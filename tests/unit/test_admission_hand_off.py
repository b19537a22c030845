"""The admission policy gpuguard-node-scope and the hand-off (docs/remediation.md#hand-off):
with ``remediation.hand_off_pools`` set, gpuguard's account may set or clear its one node
condition GpuguardRemediationRequired, and still no other condition or status field; with the
default values it writes no status at all."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpuguard.model import remediation
from tests import cel, chart

GPUGUARD = "system:serviceaccount:gpuguard:gpuguard"
Obj = dict[str, Any]


def scope_policy(hand_off: bool) -> Obj:
    values = chart.defaults()
    if hand_off:
        values["controller"]["settings"]["remediation"]["hand_off_pools"] = ["NVIDIA-H100"]
    (policy,) = [p for p in chart.by_kind("ValidatingAdmissionPolicy", values)
                 if p["metadata"]["name"] == "gpuguard-node-scope"]  # fmt: skip
    return policy


def node() -> Obj:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "gpu-node-b", "annotations": {}, "labels": {}},
            "spec": {"unschedulable": True},
            "status": {"capacity": {"nvidia.com/gpu": "8"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}  # fmt: skip


def with_condition(kind: str, status: str) -> Any:
    def apply(n: Obj) -> None:
        n["status"]["conditions"] = [c for c in n["status"]["conditions"] if c["type"] != kind]
        n["status"]["conditions"].append({"type": kind, "status": status})
    return apply


def refused_by(hand_off: bool, change: Any, old: Obj | None = None) -> list[str]:
    before = old or node()
    after = copy.deepcopy(before)
    change(after)
    refused = cel.refusals(scope_policy(hand_off), after, old=before, username=GPUGUARD,
                           operation="UPDATE")  # fmt: skip
    return cel.rule_names(refused)


HAND_OFF = remediation.HAND_OFF_CONDITION


@pytest.mark.parametrize(("name", "hand_off", "change", "refused"), [
    ("hand-off-sets-its-condition", True, with_condition(HAND_OFF, "True"), []),
    ("hand-off-off-no-status-at-all", False, with_condition(HAND_OFF, "True"),
     ["node-scope-spec"]),
    ("hand-off-marks-the-node-not-ready", True, with_condition("Ready", "False"),
     ["node-scope-spec"]),
    ("hand-off-raises-capacity", True,
     lambda n: n["status"]["capacity"].update({"nvidia.com/gpu": "16"}), ["node-scope-spec"]),
])  # fmt: skip
def test_gpuguard_writes_only_its_hand_off_condition_and_only_when_opted_in(
    name: str, hand_off: bool, change: Any, refused: list[str]
) -> None:
    assert refused_by(hand_off, change) == refused


def test_the_hand_off_is_cleared_after_the_return() -> None:
    raised = node()
    with_condition(HAND_OFF, "True")(raised)
    assert refused_by(True, with_condition(HAND_OFF, "False"), old=raised) == []
