"""A person or workload holding the built-in ``edit`` role in gpuguard's namespace: creates
pods, Jobs, Secrets and token requests there, edits the chart's DaemonSet and Deployment (so
the pods their controllers make are in the attacker's shape), execs into pods."""

from __future__ import annotations

from typing import Any

from gpuguard.actuators import jobs
from gpuguard.model import change
from tests import admission, chart
from tests.hostile import model
from tests.hostile import objects as o
from tests.hostile.model import Case

Obj = dict[str, Any]
A = "namespace-tenant"
DS = admission.DAEMONSET_CONTROLLER
RS = admission.REPLICASET_CONTROLLER
JC = admission.JOB_CONTROLLER
SHELL = ["sh", "-c", "cat /host/etc/shadow > /dev/termination-log"]


def agent_c(p: Obj) -> Obj:
    container: Obj = p["spec"]["containers"][0]
    return container


def agent_mount(name: str) -> Any:
    return lambda p: next(m for m in agent_c(p)["volumeMounts"] if m["name"] == name)


def agent_volume(p: Obj, name: str) -> Obj:
    volume: Obj = next(v for v in p["spec"]["volumes"] if v["name"] == name)
    return volume


def _swap_mount_names(p: Obj) -> None:
    """host /etc mounted where the (writable) state directory goes: path-only checks pass."""
    for m in agent_c(p)["volumeMounts"]:
        if m["name"] == "state":
            m["name"] = "host-etc"
        elif m["name"] == "host-etc":
            m["name"] = "state"


def _replace_source(volume: Obj) -> None:
    volume.pop("hostPath")
    volume["emptyDir"] = {}


AGENT = "gpuguard-agent-pod"


def _agent(name: str, tries: str, rules: list[str], *changes: Any,
           user: str = DS) -> Case:
    return Case(A, f"agent-{name}", tries, o.changed(admission.agent_pod(), *changes), user,
                {AGENT: rules})


AGENT_CASES = [
    _agent("host-etc-writable-at-the-state-path", "host /etc read-write where the state goes",
           ["agent-volumes"], _swap_mount_names),
    _agent("state-points-at-host-root", "the writable state volume is the host's /",
           ["agent-volumes"], lambda p: agent_volume(p, "state")["hostPath"].update(path="/")),
    _agent("state-points-at-host-etc", "the writable state volume is host /etc",
           ["agent-volumes"], lambda p: agent_volume(p, "state")["hostPath"].update(path="/etc")),
    _agent("host-etc-read-write", "readOnly: false on host /etc", ["agent-volumes"],
           lambda p: agent_mount("host-etc")(p).update(readOnly=False)),
    _agent("proc-mounted-at-etc-path", "host /proc mounted at the /etc path",
           ["agent-volumes"], lambda p: agent_mount("host-proc")(p).update(mountPath="/host/etc2")),
    _agent("hostpath-type-changed", "/sys as any type (a socket, a file)", ["agent-volumes"],
           lambda p: agent_volume(p, "host-sys")["hostPath"].update(type="")),
    _agent("extra-hostpath-var-run", "the container runtime's socket directory",
           ["agent-volumes"], lambda p: p["spec"]["volumes"].append(
               {"name": "run", "hostPath": {"path": "/run", "type": "Directory"}})),
    _agent("subpath-escape", "a subPath under the writable state mount", ["agent-volumes"],
           lambda p: agent_mount("state")(p).update(subPath="../../etc")),
    _agent("bidirectional-propagation", "Bidirectional propagation on /run/nvidia",
           ["agent-volumes"],
           lambda p: agent_mount("host-run-nvidia")(p).update(mountPropagation="Bidirectional")),
    _agent("emptydir-named-like-a-hostpath", "host-sys replaced by another source",
           ["agent-volumes"], lambda p: _replace_source(agent_volume(p, "host-sys"))),
    _agent("secret-volume", "mounts a Secret of the namespace", ["agent-volumes"],
           lambda p: p["spec"]["volumes"].append(
               {"name": "s", "secret": {"secretName": "gpuguard-webhook"}})),
    _agent("declared-configmap-swapped", "the declared-versions volume reads gpuguard-settings",
           ["agent-volumes"],
           lambda p: agent_volume(p, "declared")["configMap"].update(name="gpuguard-settings")),
    _agent("auto-mounted-token", "the account's auto-mounted token", ["agent-volumes"],
           lambda p: p["spec"].update(automountServiceAccountToken=True)),
    _agent("long-lived-projected-token", "a day-long projected token", ["agent-volumes"],
           lambda p: agent_volume(p, "node-status-token")["projected"]["sources"][0][
               "serviceAccountToken"].update(expirationSeconds=86400)),
    _agent("token-for-vault", "a token for another audience", ["agent-volumes"],
           lambda p: agent_volume(p, "node-status-token")["projected"]["sources"][0][
               "serviceAccountToken"].update(audience="vault")),
    _agent("run-as-root", "runAsUser 0 without agent.runAsRoot", ["agent-privileges"],
           lambda p: agent_c(p)["securityContext"].update(runAsUser=0)),
    _agent("run-as-another-user", "runAsUser 1000", ["agent-privileges"],
           lambda p: agent_c(p)["securityContext"].update(runAsUser=1000)),
    _agent("cap-sys-admin", "capabilities.add SYS_ADMIN", ["agent-privileges"],
           lambda p: agent_c(p)["securityContext"]["capabilities"].update(add=["SYS_ADMIN"])),
    _agent("cap-sys-ptrace-without-opt-in", "SYS_PTRACE without processScan",
           ["agent-privileges"],
           lambda p: agent_c(p)["securityContext"]["capabilities"].update(add=["SYS_PTRACE"])),
    _agent("runtime-class-without-opt-in", "the NVIDIA runtime without agent.gpuState",
           ["agent-pod-fields"], lambda p: p["spec"].update(runtimeClassName="nvidia")),
    _agent("all-gpus-without-opt-in", "NVIDIA_VISIBLE_DEVICES=all without agent.gpuState",
           ["agent-hooks"], lambda p: agent_c(p)["env"].append(
               {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"})),
    _agent("caps-not-dropped", "keeps the runtime's default capabilities", ["agent-privileges"],
           lambda p: agent_c(p)["securityContext"].pop("capabilities")),
    _agent("privilege-escalation", "allowPrivilegeEscalation true", ["agent-privileges"],
           lambda p: agent_c(p)["securityContext"].update(allowPrivilegeEscalation=True)),
    _agent("privileged", "privileged without agent.kmsg.privileged", ["agent-privileges"],
           lambda p: agent_c(p)["securityContext"].update(privileged=True)),
    _agent("writable-root", "readOnlyRootFilesystem false", ["agent-privileges"],
           lambda p: agent_c(p)["securityContext"].update(readOnlyRootFilesystem=False)),
    _agent("seccomp-unconfined", "container seccomp Unconfined", ["agent-privileges"],
           lambda p: agent_c(p)["securityContext"].update(seccompProfile={"type": "Unconfined"})),
    _agent("pod-seccomp-unconfined", "pod seccomp Unconfined", ["agent-privileges"],
           lambda p: p["spec"]["securityContext"].update(seccompProfile={"type": "Unconfined"})),
    _agent("apparmor-unconfined", "AppArmor Unconfined", ["agent-privileges"],
           lambda p: agent_c(p)["securityContext"].update(
               appArmorProfile={"type": "Unconfined"})),
    _agent("apparmor-annotation", "the legacy AppArmor annotation", ["agent-privileges"],
           lambda p: p["metadata"].setdefault("annotations", {}).update(
               {"container.apparmor.security.beta.kubernetes.io/agent": "unconfined"})),
    _agent("selinux-spc", "SELinux super-privileged type", ["agent-privileges"],
           lambda p: agent_c(p)["securityContext"].update(seLinuxOptions={"type": "spc_t"})),
    _agent("unmasked-proc", "procMount Unmasked", ["agent-privileges"],
           lambda p: agent_c(p)["securityContext"].update(procMount="Unmasked")),
    _agent("root-group", "supplementalGroups [0]", ["agent-privileges"],
           lambda p: p["spec"]["securityContext"].update(supplementalGroups=[0])),
    _agent("pod-run-as-root", "pod-level runAsUser 0", ["agent-privileges"],
           lambda p: p["spec"]["securityContext"].update(runAsUser=0)),
    _agent("sysctl", "an unsafe sysctl", ["agent-privileges"],
           lambda p: p["spec"]["securityContext"].update(
               sysctls=[{"name": "kernel.core_pattern", "value": "|/host/tmp/x"}])),
    _agent("host-pid", "the host's PID namespace", ["agent-privileges"],
           lambda p: p["spec"].update(hostPID=True)),
    _agent("host-network", "the host's network", ["agent-privileges"],
           lambda p: p["spec"].update(hostNetwork=True)),
    _agent("share-process-namespace", "shareProcessNamespace", ["agent-privileges"],
           lambda p: p["spec"].update(shareProcessNamespace=True)),
    _agent("fake-root", "--root at a tenant-writable directory (fake GPUs gone)",
           ["agent-container"],
           lambda p: agent_c(p)["args"].__setitem__(1, "--root=/var/lib/gpuguard/fake")),
    _agent("fake-kernel-log", "--kernel-log at a planted file (fake Xid 79)",
           ["agent-container"],
           lambda p: agent_c(p)["args"].__setitem__(6, "--kernel-log=/var/lib/gpuguard/kern.log")),
    _agent("extra-arg", "one more argument", ["agent-container"],
           lambda p: agent_c(p)["args"].append("--xid-overrides=/var/lib/gpuguard/x.yaml")),
    _agent("command-override", "a shell instead of `gpuguard agent`", ["agent-container"],
           lambda p: agent_c(p).update(command=SHELL)),
    _agent("other-image", "an attacker's image", ["agent-container"],
           lambda p: agent_c(p).update(image="attacker/agent:latest")),
    _agent("init-runs-a-shell", "the init container runs a shell as root",
           ["agent-container"], lambda p: p["spec"]["initContainers"][0].update(command=SHELL)),
    _agent("init-mounts-host-etc", "the root init container mounts host /etc",
           ["agent-container", "agent-volumes"],
           lambda p: p["spec"]["initContainers"][0]["volumeMounts"].append(
               {"name": "host-etc", "mountPath": "/host/etc"})),
    _agent("init-cap-sys-admin", "the init container adds SYS_ADMIN", ["agent-privileges"],
           lambda p: p["spec"]["initContainers"][0]["securityContext"]["capabilities"].update(
               add=["CHOWN", "SYS_ADMIN"])),
    _agent("second-init", "a second init container", ["agent-container"],
           lambda p: p["spec"]["initContainers"].append(
               {"name": "x", "image": o.IMAGE, "command": SHELL})),
    _agent("sidecar", "a restartable init container (sidecar)", ["agent-hooks"],
           lambda p: p["spec"]["initContainers"][0].update(restartPolicy="Always")),
    _agent("node-name-literal", "NODE_NAME set to another node", ["agent-hooks"],
           lambda p: agent_c(p)["env"].__setitem__(0, {"name": "NODE_NAME",
                                                        "value": "gpu-node-c"})),
    _agent("ld-preload", "LD_PRELOAD from the state directory", ["agent-hooks"],
           lambda p: agent_c(p)["env"].append({"name": "LD_PRELOAD",
                                               "value": "/var/lib/gpuguard/x.so"})),
    _agent("exec-liveness", "an exec liveness probe", ["agent-hooks"],
           lambda p: agent_c(p).update(livenessProbe={"exec": {"command": SHELL}})),
    _agent("post-start-hook", "a postStart hook", ["agent-hooks"],
           lambda p: agent_c(p).update(lifecycle={"postStart": {"exec": {"command": SHELL}}})),
    _agent("host-port", "its metrics port on the host's network", ["agent-hooks"],
           lambda p: agent_c(p)["ports"][0].update(hostPort=9809)),
    _agent("tty-stdin", "an interactive container", ["agent-hooks"],
           lambda p: agent_c(p).update(stdin=True, tty=True)),
    _agent("node-name-at-creation", "bound to a chosen node, skipping the scheduler",
           ["agent-pod-fields"], lambda p: p["spec"].update(nodeName="gpu-node-c")),
    _agent("host-aliases", "hostAliases redirect the API server's name",
           ["agent-pod-fields"], lambda p: p["spec"].update(
               hostAliases=[{"ip": "10.0.0.66", "hostnames": ["kubernetes.default.svc"]}])),
    _agent("dns-config", "a resolver of the attacker's", ["agent-pod-fields"],
           lambda p: p["spec"].update(dnsPolicy="None", dnsConfig={"nameservers": ["10.0.0.66"]})),
    _agent("system-priority", "system-node-critical preempts tenants", ["agent-pod-fields"],
           lambda p: p["spec"].update(priorityClassName="system-node-critical")),
    _agent("runtime-class", "another RuntimeClass (no sandbox, or the NVIDIA one)",
           ["agent-pod-fields"], lambda p: p["spec"].update(runtimeClassName="nvidia")),
    Case(A, "agent-pod-by-hand", "an agent pod created directly, not by its DaemonSet",
         o.hand_made(admission.agent_pod()), o.EDITOR, {"gpuguard-creators": ["pod-creator"]}),
    Case(A, "agent-pod-from-another-daemonset", "a DaemonSet of their own running as the agent",
         o.changed(admission.agent_pod(), lambda p: p["metadata"]["ownerReferences"][0].update(
             name="evil-agent")), DS, {"gpuguard-creators": ["pod-creator"]}),
    Case(A, "agent-ephemeral-debug-container", "kubectl debug: an ephemeral container",
         o.changed(admission.agent_pod(), lambda p: p["spec"].update(
             nodeName=o.NODE, ephemeralContainers=[
                 {"name": "debugger", "image": "busybox:1.36", "command": SHELL}])),
         o.EDITOR, {AGENT: ["agent-container"]}, operation="UPDATE",
         old=o.changed(admission.agent_pod(), lambda p: p["spec"].update(nodeName=o.NODE)),
         subresource="ephemeralcontainers"),
]


def ctl_c(p: Obj) -> Obj:
    container: Obj = p["spec"]["containers"][0]
    return container


CTL = "gpuguard-controller-pod"


def _ctl(name: str, tries: str, rules: list[str], *changes: Any) -> Case:
    return Case(A, f"controller-{name}", tries, o.changed(admission.controller_pod(), *changes),
                RS, {CTL: rules})


CONTROLLER_CASES = [
    _ctl("host-aliases", "hostAliases point Prometheus at the attacker",
         ["controller-pod-fields"], lambda p: p["spec"].update(hostAliases=[
             {"ip": "10.0.0.66", "hostnames": ["prometheus-operated.monitoring"]}])),
    _ctl("dns-config", "the attacker's resolver", ["controller-pod-fields"],
         lambda p: p["spec"].update(dnsPolicy="None", dnsConfig={"nameservers": ["10.0.0.66"]})),
    _ctl("node-name", "pinned to a node the attacker is root on", ["controller-pod-fields"],
         lambda p: p["spec"].update(nodeName="gpu-node-c")),
    _ctl("hostname", "a chosen hostname", ["controller-pod-fields"],
         lambda p: p["spec"].update(hostname="prometheus")),
    _ctl("runtime-class", "another RuntimeClass", ["controller-pod-fields"],
         lambda p: p["spec"].update(runtimeClassName="runc-debug")),
    _ctl("token-at-another-path", "the API token mounted where a sidecar reads it",
         ["controller-volumes"],
         lambda p: ctl_c(p)["volumeMounts"][-1].update(mountPath="/tmp/token")),
    _ctl("settings-at-token-path", "settings mounted over the token path",
         ["controller-volumes"],
         lambda p: ctl_c(p)["volumeMounts"][0].update(
             mountPath="/var/run/secrets/kubernetes.io/serviceaccount")),
    _ctl("settings-from-another-configmap", "settings from a ConfigMap the tenant wrote",
         ["controller-volumes"],
         lambda p: p["spec"]["volumes"][0]["configMap"].update(name="tenant-settings")),
    _ctl("hostpath", "a hostPath volume", ["controller-volumes"],
         lambda p: p["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/"}})),
    _ctl("token-to-another-audience", "its token minted for another audience",
         ["controller-volumes"],
         lambda p: p["spec"]["volumes"][-1]["projected"]["sources"][0][
             "serviceAccountToken"].update(audience="vault")),
    _ctl("run-as-root", "runAsUser 0", ["controller-privileges"],
         lambda p: ctl_c(p)["securityContext"].update(runAsUser=0)),
    _ctl("pod-run-as-other-user", "pod runAsUser 1000", ["controller-privileges"],
         lambda p: p["spec"]["securityContext"].update(runAsUser=1000)),
    _ctl("seccomp-unconfined", "seccomp Unconfined", ["controller-privileges"],
         lambda p: ctl_c(p)["securityContext"].update(seccompProfile={"type": "Unconfined"})),
    _ctl("apparmor-unconfined", "AppArmor Unconfined", ["controller-privileges"],
         lambda p: ctl_c(p)["securityContext"].update(appArmorProfile={"type": "Unconfined"})),
    _ctl("cap-net-raw", "capabilities.add NET_RAW", ["controller-privileges"],
         lambda p: ctl_c(p)["securityContext"]["capabilities"].update(add=["NET_RAW"])),
    _ctl("privilege-escalation", "allowPrivilegeEscalation true", ["controller-privileges"],
         lambda p: ctl_c(p)["securityContext"].update(allowPrivilegeEscalation=True)),
    _ctl("host-network", "the host's network", ["controller-privileges"],
         lambda p: p["spec"].update(hostNetwork=True)),
    _ctl("prometheus-url-env", "GPUGUARD_PROMETHEUS__URL of the attacker's",
         ["controller-env"], lambda p: ctl_c(p)["env"].append(
             {"name": "GPUGUARD_PROMETHEUS__URL", "value": "http://10.0.0.66:9090"})),
    _ctl("init-container", "an init container with the token", ["controller-container"],
         lambda p: p["spec"].update(initContainers=[
             {"name": "x", "image": "busybox:1.36", "command": SHELL}])),
    _ctl("sidecar-container", "a second container sharing the token",
         ["controller-container"], lambda p: p["spec"]["containers"].append(
             {"name": "x", "image": "busybox:1.36", "command": SHELL})),
    _ctl("shell-command", "a shell with the token", ["controller-command"],
         lambda p: ctl_c(p).update(command=SHELL)),
    _ctl("host-port", "its port on the host network", ["controller-command"],
         lambda p: ctl_c(p)["ports"][0].update(hostPort=9808)),
    Case(A, "controller-pod-by-hand", "the controller's exact pod, made by hand",
         o.hand_made(admission.controller_pod()), o.EDITOR,
         {"gpuguard-creators": ["pod-creator"]}),
    Case(A, "controller-from-a-tenant-replicaset", "a ReplicaSet of their own as gpuguard",
         o.changed(admission.controller_pod(), lambda p: p["metadata"]["ownerReferences"][0]
                   .update(name="miner-6c9d")), RS, {"gpuguard-creators": ["pod-creator"]}),
]


def _job(name: str, tries: str, made: Obj, user: str, refused: dict[str, list[str]],
         extra: dict[str, list[str]] | None = None) -> Case:
    return Case(A, name, tries, made, user, refused, extra=extra)


BURNIN = admission.burnin()
EVIDENCE = admission.evidence()
JOB_CASES = [
    _job("precreated-burnin-with-gpuguards-name", "a burn-in Job of gpuguard's exact name and "
         "shape, pinned to a healthy node, so it reads `passed`", o.changed(
             BURNIN, lambda j: j["spec"]["template"]["spec"].update(nodeName="gpu-node-c"),
             lambda j: j["metadata"]["labels"].update({"gpuguard.io/node": "gpu-node-c"}),
             lambda j: j["spec"]["template"]["metadata"]["labels"].update(
                 {"gpuguard.io/node": "gpu-node-c"})),
         o.EDITOR, {"gpuguard-creators": ["job-creator"]}),
    _job("precreated-evidence-job", "gpuguard's evidence Job, made by hand", EVIDENCE,
         o.EDITOR, {"gpuguard-creators": ["job-creator"]}),
    _job("gate-smoke-test", "a finished-looking burn-in labelled for the onboarding gate",
         admission.burnin(), o.EDITOR, {"gpuguard-creators": ["job-creator"]}),
    _job("gpu-isolate-undo-by-hand", "`gpuguard gpu-isolate undo` on a card gpuguard isolated",
         o.gpu_isolation("undo"), o.EDITOR, {"gpuguard-creators": ["job-creator"]}),
    _job("gpu-isolate-apply-by-hand", "`gpuguard gpu-isolate apply` on a healthy card",
         o.gpu_isolation("apply"), o.EDITOR, {"gpuguard-creators": ["job-creator"]}),
    Case(A, "gpu-reset-by-hand", "gpuguard's own GPU-reset Job (CAP_SYS_ADMIN), made by hand "
         "to reset a card in use", admission.gpu_reset(), o.EDITOR,
         {"gpuguard-creators": ["job-creator"]}, values=chart.with_gpu_reset()),
    Case(A, "gpu-reset-without-the-opt-in", "the GPU-reset Job where no pool opted in",
         admission.gpu_reset(), o.EDITOR, {"gpuguard-creators": ["job-creator"], "gpuguard-jobs": [
             "command", "env", "capabilities", "security-context"]}),
    _job("pod-claiming-the-burnin-job", "a pod with the Job as owner, made by hand (its "
         "termination message read as the result)", o.job_pod(BURNIN), o.EDITOR,
         {"gpuguard-creators": ["pod-creator"]}),
    _job("evidence-pod-by-hand", "an evidence pod without a Job", o.hand_made(
        o.job_pod(EVIDENCE)), JC, {"gpuguard-creators": ["pod-creator"]}),
    _job("tenant-job-as-default", "their own Job in gpuguard's namespace", o.job(
        "miner", {"containers": [{"name": "m", "image": "attacker/miner:latest"}]}),
         o.EDITOR, {"gpuguard-creators": ["job-creator"]}),
    _job("tenant-pod-as-default-account", "a root pod under the privileged Pod Security level",
         o.pod("miner", "default"), o.EDITOR,
         {"gpuguard-namespace": ["namespace"]}),
    _job("device-plugin-account-without-opt-in", "a pod as gpuguard-device-plugin while the "
         "chart runs no plugins", o.pod("plugin", "gpuguard-device-plugin"), DS,
         {"gpuguard-creators": ["pod-creator"], "gpuguard-namespace": ["namespace"]}),
]

CONNECT_CASES = [
    Case(A, f"{kind.removeprefix('Pod').removesuffix('Options').lower()}-into-{target}",
         f"{kind} into {target}'s pod", o.connect(kind), o.EDITOR,
         {"gpuguard-connect": ["pod-connect"]}, operation="CONNECT",
         subresource=sub, target=name)
    for kind, sub in (("PodExecOptions", "exec"), ("PodAttachOptions", "attach"),
                      ("PodPortForwardOptions", "portforward"))
    for target, name in (("controller", admission.CONTROLLER_POD),
                         ("agent", "gpuguard-agent-x2k4p"))
]

TOKEN_CASES = [
    Case(A, "token-request-bound-to-the-controller-pod", "kubectl create token gpuguard "
         "--bound-object-kind Pod --bound-object-name <the controller's pod>: the token would "
         "carry the pod's claims", o.token_request("gpuguard", admission.CONTROLLER_POD),
         o.EDITOR, {"gpuguard-tokens": ["token-request"]}, subresource="token",
         target="gpuguard"),
    Case(A, "token-request-unbound", "kubectl create token gpuguard",
         o.token_request("gpuguard", None), o.EDITOR, {"gpuguard-tokens": ["token-request"]},
         subresource="token", target="gpuguard"),
    Case(A, "token-request-for-the-agent", "a token of gpuguard-agent (nodes/status patch)",
         o.token_request("gpuguard-agent", None), o.EDITOR,
         {"gpuguard-tokens": ["token-request"]}, subresource="token", target="gpuguard-agent"),
    Case(A, "legacy-token-secret", "a service-account-token Secret of gpuguard (never expires)",
         o.token_secret("gpuguard"), o.EDITOR, {"gpuguard-token-secrets": ["token-secret"]}),
    Case(A, "legacy-token-secret-of-the-agent", "the same for gpuguard-agent",
         o.token_secret("gpuguard-agent"), o.EDITOR,
         {"gpuguard-token-secrets": ["token-secret"]}),
]

LEASE_CASES = [
    Case(A, "lease-hijack", "holds the leader Lease so the guard stands by",
         o.lease("attacker"), o.EDITOR, {"gpuguard-leader": ["leader-writer"]},
         operation="UPDATE", old=o.lease(admission.CONTROLLER_POD)),
    Case(A, "lease-delete", "deletes the leader Lease", None, o.EDITOR,
         {"gpuguard-leader": ["leader-writer"]}, operation="DELETE",
         old=o.lease(admission.CONTROLLER_POD)),
    Case(A, "lease-precreate", "creates the Lease before gpuguard starts",
         o.lease("attacker"), o.EDITOR, {"gpuguard-leader": ["leader-writer"]}),
]

LEDGER_CASES = [
    Case(A, "ledger-line-injected", "appends a line to a ledger segment",
         o.config_map("gpuguard-ledger-2026-09-0", {"gpuguard.io/ledger": "segment"}), o.EDITOR,
         {"gpuguard-ledger": ["ledger-writer"]}, operation="UPDATE",
         old=o.config_map("gpuguard-ledger-2026-09-0", {"gpuguard.io/ledger": "segment"})),
    Case(A, "ledger-segment-forged", "a new labelled segment with a card's history",
         o.config_map("gpuguard-ledger-2026-09-7", {"gpuguard.io/ledger": "segment"}), o.EDITOR,
         {"gpuguard-ledger": ["ledger-writer"]}),
]

CASES = [*AGENT_CASES, *CONTROLLER_CASES, *JOB_CASES, *CONNECT_CASES, *TOKEN_CASES,
         *LEASE_CASES, *LEDGER_CASES]


# ---- with the chart's per-node device plugins (devicePlugin.enabled) -------------------------
PLUGINS = {**chart.defaults(), "devicePlugin": {**chart.defaults()["devicePlugin"],
                                                "enabled": True}}
PLUGIN = "gpuguard-device-plugin-pod"


def plugin_c(p: Obj) -> Obj:
    container: Obj = p["spec"]["containers"][0]
    return container


def _plugin(name: str, tries: str, rules: list[str], *changes: Any) -> Case:
    made = o.changed(admission.device_plugin_pods(PLUGINS)[0], *changes)
    return Case(A, f"device-plugin-{name}", tries, made, DS, {PLUGIN: rules}, values=PLUGINS)


PLUGIN_CASES = [
    _plugin("sees-every-gpu", "NVIDIA_VISIBLE_DEVICES=all: advertises the isolated GPU",
            ["device-plugin-container"], lambda p: plugin_c(p)["env"][0].update(value="all")),
    _plugin("sees-a-chosen-set", "a GPU set the chart does not list",
            ["device-plugin-container"], lambda p: plugin_c(p)["env"][0].update(value="0,1,2,3")),
    _plugin("extra-env", "LD_PRELOAD in the plugin", ["device-plugin-container"],
            lambda p: plugin_c(p)["env"].append({"name": "LD_PRELOAD", "value": "/x.so"})),
    _plugin("other-image", "an attacker's plugin image", ["device-plugin-container"],
            lambda p: plugin_c(p).update(image="attacker/plugin:latest")),
    _plugin("shell-command", "a shell in the plugin", ["device-plugin-container"],
            lambda p: plugin_c(p).update(command=SHELL)),
    _plugin("host-root", "host / mounted", ["device-plugin-volumes"],
            lambda p: p["spec"]["volumes"][0]["hostPath"].update(path="/")),
    _plugin("auto-mounted-token", "an API token in the plugin", ["device-plugin-volumes"],
            lambda p: p["spec"].update(automountServiceAccountToken=True)),
    _plugin("privileged", "a privileged plugin (every device node)",
            ["device-plugin-privileges"],
            lambda p: plugin_c(p)["securityContext"].update(privileged=True)),
    _plugin("cap-sys-admin", "capabilities.add SYS_ADMIN", ["device-plugin-privileges"],
            lambda p: plugin_c(p)["securityContext"]["capabilities"].update(add=["SYS_ADMIN"])),
    _plugin("host-pid", "the host's PID namespace", ["device-plugin-privileges"],
            lambda p: p["spec"].update(hostPID=True)),
    _plugin("runc-runtime", "without the NVIDIA runtime (NVIDIA_VISIBLE_DEVICES ignored)",
            ["device-plugin-privileges"], lambda p: p["spec"].pop("runtimeClassName")),
    _plugin("node-name", "bound to a chosen node", ["device-plugin-privileges"],
            lambda p: p["spec"].update(nodeName="gpu-node-c")),
    Case(A, "device-plugin-by-hand", "a plugin pod made by hand",
         o.hand_made(admission.device_plugin_pods(PLUGINS)[0]), o.EDITOR,
         {"gpuguard-creators": ["pod-creator"]}, values=PLUGINS),
]

# ---- a declared change's Job (gpuguard-change), by someone other than gpuguard ---------------
TAINT_TEMPLATE = change.job_template(model.CHANGE_TEMPLATES["data"], "taint")


def change_job() -> Obj:
    return jobs.change_job(o.NODE, "drv-580", "boot-1", TAINT_TEMPLATE, deadline_s=7200,
                           env={"GPUGUARD_CHANGE": "drv-580"})


CHANGE_CASES = [
    Case(A, "change-job-by-hand", "an approved change template run by a namespace editor",
         change_job(), o.EDITOR, {"gpuguard-creators": ["job-creator"],
                                  "gpuguard-change-jobs": ["creator"]}),
    Case(A, "change-job-privileged", "the unprivileged template made privileged",
         o.changed(change_job(), lambda j: j["spec"]["template"]["spec"]["containers"][0][
             "securityContext"].update(privileged=True)), o.GPUGUARD,
         {"gpuguard-change-jobs": ["privileges"]}, extra=o.POD_TOKEN),
    Case(A, "change-pod-by-hand", "a change pod without a Job", o.hand_made(
        o.job_pod(change_job())), o.EDITOR, {"gpuguard-creators": ["pod-creator"],
                                             "gpuguard-change-jobs": ["creator"]}),
]

CASES += [*PLUGIN_CASES, *CHANGE_CASES]
