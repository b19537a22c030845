"""What must stay admitted: gpuguard's own objects and writes, in every opt-in shape of the
chart (each rendered with the values that make it), and the everyday writes of people,
kubelets and other tools that the policies must leave alone."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpuguard.actuators import jobs
from gpuguard.model import annotation_keys as keys
from gpuguard.model import gpu_isolation, remediation, settings
from tests import admission, chart
from tests.hostile import objects as o
from tests.hostile.model import Case

Obj = dict[str, Any]
OWN = "gpuguard-itself"
EVERYDAY = "everyday-others"
JC = admission.JOB_CONTROLLER
DS = admission.DAEMONSET_CONTROLLER
RS = admission.REPLICASET_CONTROLLER


def values(**paths: Any) -> Obj:
    """The chart's defaults with dotted paths set, e.g. ``agent__kmsg__privileged=True``."""
    chosen = chart.defaults()
    for path, value in paths.items():
        *parents, leaf = path.split("__")
        node = chosen
        for part in parents:
            node = node[part]
        node[leaf] = value
    return chosen


OPT_INS: dict[str, Obj] = {
    "defaults": values(),
    "kmsg-privileged": values(agent__kmsg__privileged=True),
    "process-scan": values(agent__processScan__enabled=True),
    "run-as-root": values(agent__runAsRoot=True),
    "pod-resources": values(agent__podResources__enabled=True, agent__runAsRoot=True),
    "pod-resources-non-root": values(agent__podResources__enabled=True),
    "kern-log-file": values(agent__kernelLogFile="/var/log/kern.log"),
    "no-node-conditions": values(agent__nodeConditions__enabled=False),
    "xid-overrides": chart.with_xid_overrides(),
    "one-log-group": values(agent__logGroups=[4]),
    "device-plugin": values(devicePlugin__enabled=True),
    "gpu-state": values(agent__gpuState__enabled=True),
    "gpu-reset": chart.with_gpu_reset(),
}


def _made_by_gpuguard(name: str, made: Obj, vals: Obj | None = None) -> list[Case]:
    """gpuguard creates the Job with its pod's token; the Job controller makes its pod."""
    return [Case(OWN, f"{name}-job", "", made, o.GPUGUARD, {}, extra=o.POD_TOKEN, values=vals),
            Case(OWN, f"{name}-defaulted-job", "", admission.defaulted(made), o.GPUGUARD, {},
                 extra=o.POD_TOKEN, values=vals),
            Case(OWN, f"{name}-pod", "", o.job_pod(made), JC, {}, values=vals)]


def _xid_isolation() -> Obj:
    return jobs.gpu_isolation_job(o.NODE, "k", action="apply", uuids=(o.CARD,), image=o.IMAGE,
                                  xid_overrides=True)


JOBS = [
    *_made_by_gpuguard("evidence", admission.evidence()),
    *_made_by_gpuguard("burnin", admission.burnin()),
    *_made_by_gpuguard("gpu-burnin", admission.gpu_burnin()),
    *_made_by_gpuguard("change-burnin", jobs.change_burnin_job(
        o.NODE, "drv-580", "boot-2", gpus=8, mode="matmul", image=o.IMAGE,
        runtime_class="nvidia", deadline=settings.DEFAULT_BURNIN_DEADLINE)),
    *_made_by_gpuguard("gpu-isolate-apply", o.gpu_isolation("apply")),
    *_made_by_gpuguard("gpu-isolate-undo", o.gpu_isolation("undo")),
    *_made_by_gpuguard("gpu-isolate-reading-xid-overrides", _xid_isolation(),
                       chart.with_xid_overrides()),
    *_made_by_gpuguard("gpu-reset", admission.gpu_reset(), chart.with_gpu_reset()),
]

PODS = [
    *(Case(OWN, f"agent-pod-{name}", "", admission.agent_pod(vals), DS, {}, values=vals)
      for name, vals in OPT_INS.items()),
    *(Case(OWN, f"agent-pod-bound-{name}", "the scheduler bound it; a label changes", o.changed(
        admission.agent_pod(vals), lambda p: p["spec"].update(nodeName=o.NODE),
        lambda p: p["metadata"]["labels"].update({"pod-template-generation": "2"})),
        DS, {}, operation="UPDATE", old=o.changed(
            admission.agent_pod(vals), lambda p: p["spec"].update(nodeName=o.NODE)),
        values=vals) for name, vals in OPT_INS.items() if name in {"defaults", "kmsg-privileged"}),
    Case(OWN, "controller-pod", "", admission.controller_pod(), RS, {}),
    Case(OWN, "controller-pod-xid-overrides", "", admission.controller_pod(
        chart.with_xid_overrides()), RS, {}, values=chart.with_xid_overrides()),
    *(Case(OWN, f"device-plugin-pod-{p['metadata']['ownerReferences'][0]['name'][23:]}", "",
           p, DS, {}, values=OPT_INS["device-plugin"])
      for p in admission.device_plugin_pods(OPT_INS["device-plugin"])),
]

AT = datetime(2026, 9, 21, 6, 5, tzinfo=UTC)
HIDES_GPU_3 = gpu_isolation.plugin_labels((gpu_isolation.IsolatedGpu(
    "GPU-3", "0000:93:00.0", "3", AT, "xid-79", capacity=8),), operator=True)
OPERATOR_NODE = o.node(labels={keys.OPERATOR_DEVICE_PLUGIN_LABEL: "true"})
ISOLATED_NODE = o.owned_by_gpuguard(o.node(True, annotations=o.ISOLATED))


def _own_node(name: str, old: Obj, *changes: o.Change) -> Case:
    return Case(OWN, name, "", o.changed(old, *changes), o.GPUGUARD, {}, operation="UPDATE",
                old=old, extra=o.POD_TOKEN)


# remediation.hand_off_pools: gpuguard's account patches nodes/status with its one condition
# GpuguardRemediationRequired (docs/remediation.md#hand-off).
HAND_OFF = values(controller__settings__remediation__hand_off_pools=["NVIDIA-H100"])
READY = o.changed(o.node(True, annotations=o.ISOLATED, name="gpu-node-h"),
                  lambda n: n.update(status={}), o.status_condition("Ready"))  # its own node:
# a node left isolated by one replayed case cannot be stored clean for the next (node-delete)
RAISED = o.changed(READY, o.status_condition(remediation.HAND_OFF_CONDITION))


def _own_status(name: str, old: Obj, *changes: o.Change) -> Case:
    return Case(OWN, name, "", o.changed(old, *changes), o.GPUGUARD, {}, operation="UPDATE",
                old=old, extra=o.POD_TOKEN, subresource="status", values=HAND_OFF)


NODE_WRITES = [
    _own_node("isolates-a-node", o.node(), o.cordon(True), o.annotate(**o.ISOLATED)),
    _own_node("records-a-verdict", ISOLATED_NODE, o.annotate(verdict="power-cycle")),
    _own_node("withholds-a-fault", o.node(), o.annotate(withheld="xid-79")),
    _own_node("returns-a-node", ISOLATED_NODE, o.cordon(False),
              o.annotate(**dict.fromkeys(o.ISOLATED))),
    _own_node("hides-an-isolated-gpu", OPERATOR_NODE, o.label(**HIDES_GPU_3),
              o.annotate(gpu_isolated="[]")),
    _own_node("labels-fit-to-train", o.node(), o.label(**{keys.FIT_LABEL: "yes"})),
    _own_node("clears-a-return-request", o.node(annotations={
        keys.GPU_RETURN: "GPU-3", keys.GPU_ISOLATED: "[]"}), o.annotate(
        gpu_return=None, gpu_isolated=None)),
    *(_own_status(f"hand-off-{name}", old, o.status_condition(remediation.HAND_OFF_CONDITION, to))
      for name, old, to in (("raises-its-condition", READY, "True"),
                            ("clears-its-condition", RAISED, "False"))),
    Case(OWN, "agent-reports-gpu-gone", "", o.changed(
        o.node(), lambda n: n.update(status={}), o.status_condition("GpuFallenOffBus")),
        o.AGENT, {}, operation="UPDATE", old=o.changed(o.node(), lambda n: n.update(status={})),
        extra=o.AGENT_TOKEN, subresource="status"),
]

LEADER = admission.CONTROLLER_POD
SEGMENT = o.config_map("gpuguard-ledger-2026-09-0", {"gpuguard.io/ledger": "segment"})
RULE = o.taint_rule(f"gpuguard-gpu-node-a-{o.CARD.lower()}",
                    labels={"app.kubernetes.io/part-of": "gpuguard"})
OTHER_WRITES = [
    Case(OWN, "creates-the-lease", "", o.lease(LEADER), o.GPUGUARD, {}, extra=o.POD_TOKEN),
    Case(OWN, "renews-the-lease", "", o.lease(LEADER), o.GPUGUARD, {}, operation="UPDATE",
         old=o.lease(LEADER), extra=o.POD_TOKEN),
    Case(OWN, "takes-over-a-silent-lease", "", o.lease(LEADER), o.GPUGUARD, {},
         operation="UPDATE", old=o.lease("gpuguard-5d8f7c9b4-old01"), extra=o.POD_TOKEN),
    Case(OWN, "releases-the-lease", "", o.lease(""), o.GPUGUARD, {}, operation="UPDATE",
         old=o.lease(LEADER), extra=o.POD_TOKEN),
    Case(OWN, "creates-a-ledger-segment", "", SEGMENT, o.GPUGUARD, {}, extra=o.POD_TOKEN),
    Case(OWN, "appends-to-the-ledger", "", SEGMENT, o.GPUGUARD, {}, operation="UPDATE",
         old=SEGMENT, extra=o.POD_TOKEN),
    Case(OWN, "creates-a-dra-taint", "", RULE, o.GPUGUARD, {}, extra=o.POD_TOKEN),
    Case(OWN, "lifts-its-dra-taint", "", None, o.GPUGUARD, {}, operation="DELETE", old=RULE,
         extra=o.POD_TOKEN),
    Case(OWN, "kubelet-requests-the-controllers-token", "", o.token_request(
        "gpuguard", LEADER), "system:node:cpu-node-a", {}, subresource="token",
         target="gpuguard"),
]

RETURNED = o.owned_by_gpuguard(o.node())  # gpuguard's entry: the cordon it lifted
EVERYDAY_WRITES = [
    Case(EVERYDAY, "person-sets-a-hold", "", o.changed(ISOLATED_NODE, o.annotate(hold="rma")),
         o.PERSON, {}, operation="UPDATE", old=ISOLATED_NODE),
    Case(EVERYDAY, "person-marks-reset-done", "", o.changed(
        ISOLATED_NODE, o.annotate(reset_done="2026-09-21T09:00:00Z")), o.PERSON, {},
         operation="UPDATE", old=ISOLATED_NODE),
    Case(EVERYDAY, "person-cordons-a-returned-node", "takes over the last field gpuguard "
         "owned (its managedFields entry goes)", o.changed(RETURNED, o.cordon(True),
                                                       lambda n: n["metadata"].update(
                                                           managedFields=[])), o.PERSON, {},
         operation="UPDATE", old=RETURNED),
    Case(EVERYDAY, "person-cordons-a-node", "", o.changed(o.node(), o.cordon(True)), o.PERSON,
         {}, operation="UPDATE", old=o.node()),
    Case(EVERYDAY, "person-labels-a-node", "", o.changed(o.node(), o.label(pool="a")),
         o.PERSON, {}, operation="UPDATE", old=o.node()),
    Case(EVERYDAY, "person-deletes-a-healthy-node", "", None, o.PERSON, {}, operation="DELETE",
         old=o.node()),
    Case(EVERYDAY, "node-controller-deletes-a-gone-instance", "", None,
         "system:serviceaccount:kube-system:node-controller", {}, operation="DELETE",
         old=ISOLATED_NODE),
    Case(EVERYDAY, "kubelet-registers-a-node", "", o.changed(
        o.node(), lambda n: n.update(status={})), o.KUBELET, {}),
    Case(EVERYDAY, "kubelet-posts-ready", "", o.changed(
        o.node(), lambda n: n.update(status={}), o.status_condition("Ready")), o.KUBELET, {},
         operation="UPDATE", old=o.changed(o.node(), lambda n: n.update(status={})),
         subresource="status"),
    Case(EVERYDAY, "tenant-pod-elsewhere", "", o.pod("trainer-0", "trainer", "team-a"),
         o.TENANT_SA, {}),
    Case(EVERYDAY, "tenant-claim", "", o.claim(None), o.TENANT_SA, {}),
    Case(EVERYDAY, "sre-rule-with-own-key", "", o.taint_rule(
        "maintenance-gpu-1", key="example.com/maint"), o.PERSON, {}),
    Case(EVERYDAY, "tenant-configmap-in-gpuguards-namespace", "", o.config_map("app-config"),
         o.EDITOR, {}),
]

CASES = [*JOBS, *PODS, *NODE_WRITES, *OTHER_WRITES, *EVERYDAY_WRITES]
