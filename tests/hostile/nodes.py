"""Attackers on Nodes other than gpuguard's own account: a person (or another tool's account)
with node patch and delete rights, a stolen kubelet credential (``system:node:NAME``, or root
on that host), and a stolen agent token (pod-bound to one GPU node)."""

from __future__ import annotations

from tests.hostile import objects as o
from tests.hostile.model import Case

PATCHER = "node-patcher"
KUBELET = "stolen-kubelet-credential"
AGENT = "stolen-agent-token"
MARKS = "gpuguard-node-marks"
INTEGRITY = "gpuguard-node-integrity"
CONDITIONS = "gpuguard-node-conditions"
ISOLATED_NODE = o.owned_by_gpuguard(o.node(True, annotations=o.ISOLATED))
HELD = o.node(True, annotations={"gpuguard.io/hold": "rma 4411"})


def _strip(n: o.Obj) -> None:
    n["metadata"]["managedFields"] = [m for m in n["metadata"]["managedFields"]
                                      if m["manager"] != "gpuguard"]


def _forge_owner(n: o.Obj) -> None:
    n["metadata"]["managedFields"].append({
        "manager": "gpuguard", "operation": "Update", "apiVersion": "v1",
        "subresource": "status", "time": "2026-09-21T07:00:00Z", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:annotations": {"f:gpuguard.io/verdict": {}}}}})


def _patch(name: str, tries: str, refused: dict[str, list[str]], old: o.Obj,
           *changes: o.Change, user: str = o.PERSON) -> Case:
    return Case(PATCHER, name, tries, o.changed(old, *changes), user, refused,
                operation="UPDATE", old=old)


PATCHES = [
    _patch("forges-an-isolation", "gpuguard's marks on a node of their choosing",
           {MARKS: ["node-marks"]}, o.node(True), o.annotate(**o.ISOLATED)),
    _patch("forges-a-pass-verdict", "verdict=pass: gpuguard returns the node",
           {MARKS: ["node-marks"]}, ISOLATED_NODE, o.annotate(verdict="pass")),
    _patch("removes-isolated-at", "makes gpuguard forget the isolation",
           {MARKS: ["node-marks"]}, ISOLATED_NODE, o.annotate(isolated_at=None)),
    _patch("forges-a-withheld-fault", "fills the breaker's level with fake withheld marks",
           {MARKS: ["node-marks"]}, o.node(), o.annotate(withheld="xid-79")),
    _patch("forges-gpu-isolated", "a GPU-level isolation mark", {MARKS: ["node-marks"]},
           o.node(), o.annotate(gpu_isolated="[]")),
    _patch("removes-the-device-plugin-label", "the isolated GPU advertised again",
           {MARKS: ["node-labels"]}, o.node(labels={"gpuguard.io/device-plugin": "excluding"}),
           o.label(**{"gpuguard.io/device-plugin": None})),
    _patch("sets-fit-to-train", "fit-to-train=yes on an unfit node", {MARKS: ["node-labels"]},
           o.node(), o.label(**{"gpuguard.io/fit-to-train": "yes"})),
    _patch("uncordons-under-a-hold", "uncordons a node under gpuguard.io/hold",
           {MARKS: ["hold"]}, HELD, o.cordon(False)),
    _patch("strips-gpuguards-managed-fields", "managedFields without gpuguard's entry: its "
           "own marks look foreign", {INTEGRITY: ["node-ownership"]}, ISOLATED_NODE, _strip),
    _patch("resets-all-managed-fields", "managedFields: [{}] resets ownership",
           {INTEGRITY: ["node-ownership"]}, ISOLATED_NODE,
           lambda n: n["metadata"].update(managedFields=[])),
    _patch("forges-a-gpuguard-owner-entry", "claims gpuguard wrote a field",
           {INTEGRITY: ["node-ownership"]}, ISOLATED_NODE, _forge_owner),
    _patch("writes-gpu-gone", "GpuFallenOffBus on a healthy node",
           {CONDITIONS: ["node-conditions"]},
           o.changed(o.node(), lambda n: n.update(status={})),
           o.status_condition("GpuFallenOffBus")),
    Case(PATCHER, "deletes-an-isolated-node", "the kubelet registers it again, clean",
         None, o.PERSON, {INTEGRITY: ["node-delete"]}, operation="DELETE", old=ISOLATED_NODE),
    Case(PATCHER, "deletes-a-node-with-an-isolated-gpu", "the same for a GPU-level isolation",
         None, o.PERSON, {INTEGRITY: ["node-delete"]}, operation="DELETE",
         old=o.node(annotations={"gpuguard.io/gpu-isolated": "[]"})),
    Case(PATCHER, "creates-a-node-with-gpuguards-marks", "a Node object carrying an isolation",
         o.node(True, annotations=o.ISOLATED, name="gpu-node-x"), o.PERSON,
         {INTEGRITY: ["node-create"]}),
]


def _kubelet(name: str, tries: str, refused: dict[str, list[str]], obj: o.Obj | None,
             operation: str = "CREATE", old: o.Obj | None = None,
             subresource: str = "") -> Case:
    return Case(KUBELET, name, tries, obj, o.KUBELET, refused, operation=operation, old=old,
                subresource=subresource)


REGISTERING = o.changed(o.node(), lambda n: n.update(status={}))
KUBELETS = [
    _kubelet("registers-with-the-plugin-label", "--node-labels=gpuguard.io/device-plugin=...",
             {INTEGRITY: ["node-create"]},
             o.changed(REGISTERING, o.label(**{"gpuguard.io/device-plugin": "excluding"}))),
    _kubelet("registers-fit-to-train", "--node-labels=gpuguard.io/fit-to-train=yes",
             {INTEGRITY: ["node-create"]},
             o.changed(REGISTERING, o.label(**{"gpuguard.io/fit-to-train": "yes"}))),
    _kubelet("registers-with-a-verdict", "an annotation gpuguard reads as its own",
             {INTEGRITY: ["node-create"]}, o.changed(REGISTERING, o.annotate(verdict="pass"))),
    _kubelet("registers-with-gpu-gone", "GpuFallenOffBus at registration",
             {INTEGRITY: ["node-create"]},
             o.changed(REGISTERING, o.status_condition("GpuFallenOffBus"))),
    _kubelet("deletes-its-isolated-node", "deletes its Node to re-register clean",
             {INTEGRITY: ["node-delete"]}, None, "DELETE", ISOLATED_NODE),
    _kubelet("writes-gpu-gone", "GpuFallenOffBus through nodes/status",
             {CONDITIONS: ["node-conditions"]},
             o.changed(REGISTERING, o.status_condition("GpuFallenOffBus")), "UPDATE",
             REGISTERING, subresource="status"),
    _kubelet("relabels-its-node", "gpuguard.io/device-plugin-visible changed",
             {MARKS: ["node-labels"]}, o.changed(o.node(labels={
                 "gpuguard.io/device-plugin-visible": "1-2-3"}), o.label(**{
                     "gpuguard.io/device-plugin-visible": "0-1-2-3"})), "UPDATE",
             o.node(labels={"gpuguard.io/device-plugin-visible": "1-2-3"})),
]

STATUS = o.changed(o.node(), lambda n: n.update(status={}))
AGENTS = [
    Case(AGENT, "writes-another-nodes-conditions", "GpuFallenOffBus on gpu-node-a",
         o.changed(o.node(name="gpu-node-a"), lambda n: n.update(status={}),
                   o.status_condition("GpuFallenOffBus")), "system:serviceaccount:gpuguard:"
         "gpuguard-agent", {CONDITIONS: ["node-conditions-own-node"]}, operation="UPDATE",
         old=o.changed(o.node(name="gpu-node-a"), lambda n: n.update(status={})),
         extra=o.AGENT_TOKEN, subresource="status"),
    Case(AGENT, "cordons-its-node", "spec.unschedulable on its own node",
         o.changed(STATUS, o.cordon(True)), "system:serviceaccount:gpuguard:gpuguard-agent",
         {CONDITIONS: ["node-conditions-only"]}, operation="UPDATE", old=STATUS,
         extra=o.AGENT_TOKEN),
    Case(AGENT, "marks-its-node-isolated", "gpuguard's marks with the agent's token",
         o.changed(STATUS, o.annotate(**o.ISOLATED)),
         "system:serviceaccount:gpuguard:gpuguard-agent",
         {MARKS: ["node-marks"], CONDITIONS: ["node-conditions-only"]}, operation="UPDATE",
         old=STATUS, extra=o.AGENT_TOKEN),
    Case(AGENT, "writes-the-ledger", "a ledger segment with the agent's token",
         o.config_map("gpuguard-ledger-2026-09-0", {"gpuguard.io/ledger": "segment"}),
         "system:serviceaccount:gpuguard:gpuguard-agent", {"gpuguard-ledger": ["ledger-writer"]},
         extra=o.AGENT_TOKEN),
]

CASES = [*PATCHES, *KUBELETS, *AGENTS]
