"""The Node admission policy, evaluated (cel-python): gpuguard's own marks and ``gpuguard.io/``
node labels are written only by gpuguard's service account, people keep their annotation keys,
and no one uncordons a node under a hold."""

from __future__ import annotations

import ast
import copy
import functools
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from gpuguard.agent import conditions as agent_conditions
from gpuguard.agent import node_status
from gpuguard.agent.counts import Counts
from gpuguard.controller import fitness_label
from gpuguard.model import annotation_keys as keys
from gpuguard.model import fleet, gpu_isolation
from gpuguard.model import node_conditions as nc
from tests import cel, chart
from tests.builders import Classifier

GPUGUARD = "system:serviceaccount:gpuguard:gpuguard"
PERSON = "alice@example.com"
Obj = dict[str, Any]


def policy() -> Obj:
    return chart.by_name("ValidatingAdmissionPolicy", "gpuguard-node-marks")


def node(unschedulable: bool = False, labels: dict[str, str] | None = None,
         **annotations: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "gpu-node-b", "annotations": dict(annotations),
                         "labels": {"kubernetes.io/hostname": "gpu-node-b", **(labels or {})}},
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
    people = set(keys.FOR_PEOPLE)
    variables = policy()["spec"]["variables"]
    (listed,) = [v["expression"] for v in variables if v["name"] == "peopleKeys"]
    assert set(ast.literal_eval(listed)) == people
    own = [getattr(keys, n) for n in dir(keys) if n.isupper() and isinstance(getattr(keys, n), str)
           and getattr(keys, n).startswith(keys.PREFIX) and getattr(keys, n) not in people
           and getattr(keys, n) != keys.PREFIX]
    for key in own:
        new = node(True, **{key: "forged"})
        refused = cel.refusals(policy(), new, old=node(True), username=PERSON, operation="UPDATE")
        assert cel.rule_names(refused) == ["node-marks"], key


# Node labels. gpuguard's writes are the product's own (``plugin_labels`` is what the
# GPU-isolation step patches, the fitness step's label is recorded from its ``mark`` call),
# applied as the merge patch of ``actuators/nodes.mark`` applies them (None removes a label).
AT = datetime(2026, 9, 21, 6, 5, tzinfo=UTC)
STOLEN = "system:serviceaccount:gpuguard:gpuguard-evidence"  # gpuguard's own Job account
KUBELET = "system:node:gpu-node-b"
OPERATOR = "system:serviceaccount:gpu-operator:gpu-operator"


def isolated_gpu(index: str) -> gpu_isolation.IsolatedGpu:
    return gpu_isolation.IsolatedGpu(f"GPU-{index}", f"0000:9{index}:00.0", index, AT, "xid-79",
                                     capacity=8)


HIDES_GPU_3 = gpu_isolation.plugin_labels((isolated_gpu("3"),), operator=True)
PLUGIN_RETURNED = gpu_isolation.plugin_labels((), operator=True)
OPERATOR_NODE = {keys.OPERATOR_DEVICE_PLUGIN_LABEL: "true"}
HIDING = {k: v for k, v in HIDES_GPU_3.items() if v is not None}


@dataclass
class Recorder:
    labels: dict[str, str | None] = field(default_factory=dict)

    def mark(self, node: fleet.Node, annotations: dict[str, str | None],
             labels: dict[str, str | None]) -> None:
        self.labels.update(labels)


def fitness_write(serving: bool) -> dict[str, str | None]:
    """The label the fitness step writes on a Ready node: yes, or no when it lost a GPU."""
    recorder = Recorder()
    fleet_node = fleet.Node("gpu-node-b", "boot-1", 8, 8 if serving else 7,
                            conditions={"Ready": "True"})
    fitness_label.FitnessLabel(recorder).run([fleet_node], AT, [], [], may_write=lambda: True)
    return recorder.labels


def relabel(labels: dict[str, str | None]) -> Any:
    def apply(n: Obj) -> None:
        for key, value in labels.items():
            if value is None:
                n["metadata"]["labels"].pop(key, None)
            else:
                n["metadata"]["labels"][key] = value
    return apply


def test_gpuguards_label_writes_are_what_the_rules_expect() -> None:
    assert HIDES_GPU_3 == {keys.DEVICE_PLUGIN_LABEL: gpu_isolation.DEVICE_PLUGIN_EXCLUDING,
                           keys.DEVICE_PLUGIN_VISIBLE_LABEL: "0-1-2-4-5-6-7",
                           keys.OPERATOR_DEVICE_PLUGIN_LABEL: "false"}
    assert set(PLUGIN_RETURNED.values()) == {None}
    assert (fitness_write(True), fitness_write(False)) == ({keys.FIT_LABEL: "yes"},
                                                           {keys.FIT_LABEL: "no"})


@pytest.mark.parametrize(("name", "old", "user", "change", "refused_by"), [
    ("gpuguard-hides-an-isolated-gpu", node(labels=OPERATOR_NODE), GPUGUARD,
     relabel(HIDES_GPU_3), []),
    ("gpuguard-hides-a-second-gpu", node(labels=HIDING), GPUGUARD,
     relabel(gpu_isolation.plugin_labels((isolated_gpu("3"), isolated_gpu("5")))), []),
    ("gpuguard-returns-the-last-gpu", node(labels=HIDING), GPUGUARD,
     relabel(PLUGIN_RETURNED), []),
    ("gpuguard-labels-a-node-fit", node(), GPUGUARD, relabel(fitness_write(True)), []),
    ("gpuguard-labels-a-node-unfit", node(labels={keys.FIT_LABEL: "yes"}), GPUGUARD,
     relabel(fitness_write(False)), []),
    ("person-makes-the-isolated-gpu-visible", node(labels=HIDING), PERSON,
     relabel({keys.DEVICE_PLUGIN_VISIBLE_LABEL: "0-1-2-3-4-5-6-7"}), ["node-labels"]),
    ("person-removes-the-plugin-labels", node(labels=HIDING), PERSON,
     relabel({keys.DEVICE_PLUGIN_LABEL: None, keys.DEVICE_PLUGIN_VISIBLE_LABEL: None}),
     ["node-labels"]),
    ("person-adds-a-plugin-label", node(), PERSON,
     relabel({k: v for k, v in HIDES_GPU_3.items() if k.startswith(keys.PREFIX)}),
     ["node-labels"]),
    ("person-adds-fit-to-train", node(), PERSON, relabel({keys.FIT_LABEL: "yes"}),
     ["node-labels"]),
    ("person-changes-fit-to-train", node(labels={keys.FIT_LABEL: "no"}), PERSON,
     relabel({keys.FIT_LABEL: "yes"}), ["node-labels"]),
    ("person-removes-fit-to-train", node(labels={keys.FIT_LABEL: "no"}), PERSON,
     relabel({keys.FIT_LABEL: None}), ["node-labels"]),
    ("gpuguards-job-account-unhides-the-gpu", node(labels=HIDING), STOLEN,
     relabel(PLUGIN_RETURNED), ["node-labels"]),
    ("kubelet-labels-its-node-fit", node(), KUBELET, relabel({keys.FIT_LABEL: "yes"}),
     ["node-labels"]),
    ("person-forges-a-mark-and-a-label", node(True), PERSON,
     both(annotate(isolated_at="2026-09-21T06:05:10Z"), relabel({keys.FIT_LABEL: "no"})),
     ["node-marks", "node-labels"]),
    ("operator-sets-its-plugin-back", node(labels=HIDING), OPERATOR,
     relabel({keys.OPERATOR_DEVICE_PLUGIN_LABEL: "true"}), []),
    ("person-switches-the-operators-plugin", node(labels=OPERATOR_NODE), PERSON,
     relabel({keys.OPERATOR_DEVICE_PLUGIN_LABEL: "false"}), []),
    ("person-labels-a-node-pool", node(labels=HIDING), PERSON,
     relabel({"pool": "training"}), []),
])
def test_node_labels_by_people_and_by_gpuguard(
    name: str, old: Obj, user: str, change: Any, refused_by: list[str]
) -> None:
    assert update(old, user, change) == refused_by


def test_no_gpuguard_label_is_peoples() -> None:
    """The keys people may write as annotations are gpuguard's as labels: no label selects or
    deselects a device plugin on a person's word (docs/security.md#admission-policies)."""
    for key in keys.FOR_PEOPLE:
        assert update(node(), PERSON, relabel({key: "x"})) == ["node-labels"], key



# gpuguard's node conditions (docs/design.md#fast-path): only the agent, only on its own Node,
# only its condition types. The agent's write is the real writer's patch body, merged by
# ``type`` as the API server merges a strategic-merge patch of ``status.conditions``.
AGENT = "system:serviceaccount:gpuguard:gpuguard-agent"
NPD = "system:serviceaccount:kube-system:node-problem-detector"
ON_B = {"authentication.kubernetes.io/node-name": ["gpu-node-b"]}
ON_A = {"authentication.kubernetes.io/node-name": ["gpu-node-a"]}
READY = {"type": "Ready", "status": "True", "reason": "KubeletReady",
         "lastHeartbeatTime": "2026-12-01T23:00:00Z"}
PCI, UUID = "0000:99:00.0", "GPU-3d1e2f7a-1b2c-4d5e-8f90-123456789abc"


@functools.cache
def conditions_policy() -> Obj:
    return chart.by_name("ValidatingAdmissionPolicy", "gpuguard-node-conditions")


def agent_patch(gone: bool) -> Obj:
    """The agent's patch body: all well, or GPU 4 gone from the bus."""
    xids = [["4", UUID, PCI, "79", 1]] if gone else []
    seen = agent_conditions.Seen(Counts.from_json({"xids": xids}), Counts(), {}, {PCI: True}, None)
    return node_status.body(agent_conditions.compute(seen, Classifier(), AT), 1.8e9)


def reporting_node() -> Obj:
    """gpu-node-b with the kubelet's Ready and the agent's conditions (all well)."""
    n = node()
    n["status"] = {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"},
                   "conditions": [READY]}
    merge_conditions(agent_patch(False))(n)
    return n


def merge_conditions(patch: Obj) -> Any:
    def apply(n: Obj) -> None:
        conditions = n["status"]["conditions"]
        for condition in patch["status"]["conditions"]:
            same = [i for i, c in enumerate(conditions) if c["type"] == condition["type"]]
            if same:
                conditions[same[0]] = condition
            else:
                conditions.append(condition)
    return apply


def set_condition(kind: str, status: str) -> Any:
    return merge_conditions({"status": {"conditions": [{"type": kind, "status": status}]}})


def drop_condition(kind: str) -> Any:
    def apply(n: Obj) -> None:
        n["status"]["conditions"] = [c for c in n["status"]["conditions"] if c["type"] != kind]
    return apply


def status_update(user: str, change: Any, extra: dict[str, list[str]] | None = None) -> list[str]:
    old = reporting_node()
    new = copy.deepcopy(old)
    change(new)
    refused = cel.refusals(conditions_policy(), new, old=old, username=user,
                           operation="UPDATE", extra=extra)
    return cel.rule_names(refused)


@pytest.mark.parametrize(("name", "user", "extra", "change", "refused_by"), [
    ("agent-reports-gpu-gone-on-its-node", AGENT, ON_B, merge_conditions(agent_patch(True)), []),
    ("agent-heartbeat", AGENT, ON_B, merge_conditions(agent_patch(False)), []),
    ("agent-writes-another-node", AGENT, ON_A, merge_conditions(agent_patch(True)),
     ["node-conditions-own-node"]),
    ("agent-token-without-a-node-name", AGENT, None, merge_conditions(agent_patch(True)),
     ["node-conditions-own-node"]),
    ("agent-marks-its-node-not-ready", AGENT, ON_B, set_condition("Ready", "False"),
     ["node-conditions-only"]),
    ("agent-adds-a-condition-of-its-own-choosing", AGENT, ON_B,
     set_condition("NetworkUnavailable", "True"), ["node-conditions-only"]),
    ("agent-labels-its-node", AGENT, ON_B, relabel({"pool": "x"}), ["node-conditions-only"]),
    ("agent-raises-allocatable", AGENT, ON_B,
     lambda n: n["status"]["allocatable"].update({"nvidia.com/gpu": "16"}),
     ["node-conditions-only"]),
    ("agent-cordons-its-node", AGENT, ON_B, cordon(True), ["node-conditions-only"]),
    ("person-writes-gpu-gone", PERSON, None, merge_conditions(agent_patch(True)),
     ["node-conditions"]),
    ("person-clears-a-condition", PERSON, None, drop_condition("GpuHardwareXid"),
     ["node-conditions"]),
    ("kubelet-posts-ready", KUBELET, None, set_condition("Ready", "True"), []),
    ("kubelet-writes-gpu-gone", KUBELET, None, set_condition("GpuFallenOffBus", "True"),
     ["node-conditions"]),
    ("npd-writes-its-own-condition", NPD, None, set_condition("KernelDeadlock", "False"), []),
    ("npd-replaces-the-list", NPD, None, drop_condition("GpuFallenOffBus"), ["node-conditions"]),
    ("gpuguard-controller-cordons", GPUGUARD, None, ISOLATE, []),
    ("gpuguard-controller-writes-a-condition", GPUGUARD, None,
     set_condition("GpuFallenOffBus", "True"), ["node-conditions"]),
])
def test_gpuguard_node_conditions_are_the_agents_on_its_own_node_only(
    name: str, user: str, extra: dict[str, list[str]] | None, change: Any,
    refused_by: list[str],
) -> None:
    assert status_update(user, change, extra) == refused_by


def test_the_policy_guards_every_condition_type_the_agent_reports() -> None:
    variables = {v["name"]: v["expression"] for v in conditions_policy()["spec"]["variables"]}
    assert ast.literal_eval(variables["gpuTypes"]) == list(nc.TYPES)
