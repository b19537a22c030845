"""The Job and controller-pod admission policies, evaluated (cel-python) on the manifests
``gpuguard manifest job …`` prints: gpuguard's own Jobs, the same Jobs after the API server's
defaulting, and the Pods the Job controller makes of them are admitted; every hostile variant
is refused by the rule named for it, whoever creates it."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from gpuguard.actuators import jobs
from gpuguard.model import settings
from tests import cel, chart
from tests.admission import (
    GPUGUARD,
    IMAGE,
    NODE,
    agent_pod,
    burnin,
    controller_pod,
    defaulted,
    evidence,
    failed_rules,
    gpu_burnin,
    pod_of,
    policy,
)
from tests.admission import container as _c
from tests.admission import pod_spec as _pod

JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
TENANT = "system:serviceaccount:gpuguard:tenant-ci"
Obj = dict[str, Any]












def change_burnin() -> Obj:
    """The burn-in after a declared change: the same shape, named by the change and boot."""
    runtime = settings.ControllerSettings().job_runtime_class  # as the controller is wired
    return jobs.change_burnin_job(NODE, "drv-580", "boot-2", gpus=8, mode="matmul", image=IMAGE,
                                  runtime_class=runtime, deadline=settings.DEFAULT_BURNIN_DEADLINE)


@pytest.mark.parametrize("build", [evidence, burnin, change_burnin],
                         ids=["evidence", "burnin", "change-burnin"])
def test_gpuguards_jobs_their_defaulted_form_and_their_pods_are_admitted(
    build: Callable[[], Obj],
) -> None:
    jobs_policy = policy("gpuguard-jobs")
    job = build()
    assert cel.refusals(jobs_policy, job, username=GPUGUARD) == []
    assert cel.refusals(jobs_policy, defaulted(job), username=GPUGUARD) == []
    pod = pod_of(job)
    assert cel.refusals(jobs_policy, pod, username=JOB_CONTROLLER) == []
    assert cel.refusals(policy("gpuguard-controller-pod"), pod, username=TENANT) is None



def _env(job: Obj, name: str, value: str) -> None:
    _c(job)["env"].append({"name": name, "value": value})


ALSO_REFUSED_BY = {
    "shell-command": {"*"},  # not gpuguard's command: what it may have is unknown, all refuse
    "other-node": {"command"},  # `--node` in the command names the label's node
    "not-pinned": {"command"},
}
JOB_ONLY = {"retried"}  # Job fields, not the pod's
SHELL = ["sh", "-c", "cat /host/etc/rancher/rke2/rke2.yaml > /dev/termination-log"]
Mutation = Callable[[Obj], None]
HOSTILE: list[tuple[str, str, Mutation]] = [
    ("poststart-exec-hook", "lifecycle",
     lambda j: _c(j).update(lifecycle={"postStart": {"exec": {"command": SHELL}}})),
    ("exec-startup-probe", "probes",
     lambda j: _c(j).update(startupProbe={"exec": {"command": SHELL}})),
    ("exec-liveness-probe", "probes",
     lambda j: _c(j).update(livenessProbe={"exec": {"command": SHELL}})),
    ("pythonwarnings-browser-trick", "env",
     lambda j: (_env(j, "PYTHONWARNINGS", "always::antigravity.x:0"),
                _env(j, "BROWSER", "/bin/sh -c 'id > /dev/termination-log' #%s"))),
    ("pythonpath", "env", lambda j: _env(j, "PYTHONPATH", "/host/var/log")),
    ("env-from-secret", "env",
     lambda j: _c(j).update(envFrom=[{"secretRef": {"name": "anything"}}])),
    ("env-value-from", "env", lambda j: _c(j)["env"].append(
        {"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {"fieldPath": "spec"}}})),
    ("extra-args", "command", lambda j: _c(j).update(args=["--kernel-log", "/host/etc/shadow"])),
    ("shell-command", "command", lambda j: _c(j).update(command=SHELL)),
    ("evidence-root-elsewhere", "command", lambda j: _c(j)["command"].__setitem__(3, "/")),
    ("working-dir", "container-fields", lambda j: _c(j).update(workingDir="/host/var/log")),
    ("termination-message-elsewhere", "container-fields",
     lambda j: _c(j).update(terminationMessagePath="/host/var/log/x")),
    ("other-image", "image", lambda j: _c(j).update(image="attacker/miner:latest")),
    ("privileged", "privileges", lambda j: _c(j)["securityContext"].update(privileged=True)),
    ("sys-admin-cap", "capabilities",
     lambda j: _c(j)["securityContext"]["capabilities"].update(add=["SYS_ADMIN"])),
    ("unmasked-proc", "security-context",
     lambda j: _c(j)["securityContext"].update(procMount="Unmasked")),
    ("seccomp-unconfined", "pod-security-context",
     lambda j: _pod(j)["securityContext"].update(seccompProfile={"type": "Unconfined"})),
    ("sysctl", "pod-security-context",
     lambda j: _pod(j)["securityContext"].update(sysctls=[{"name": "kernel.x", "value": "1"}])),
    ("host-pid", "host-namespaces", lambda j: _pod(j).update(hostPID=True)),
    ("host-network", "host-namespaces", lambda j: _pod(j).update(hostNetwork=True)),
    ("host-etc-volume", "volumes", lambda j: _pod(j)["volumes"].append(
        {"name": "host-etc", "hostPath": {"path": "/etc", "type": "Directory"}})),
    ("var-log-is-now-root", "volumes",
     lambda j: _pod(j)["volumes"][1]["hostPath"].update(path="/")),
    ("writable-mount", "mounts", lambda j: _c(j)["volumeMounts"][0].update(readOnly=False)),
    ("subpath-mount", "mounts", lambda j: _c(j)["volumeMounts"][1].update(subPath="..")),
    ("other-node", "node", lambda j: _pod(j).update(nodeName="control-plane-1")),
    ("not-pinned", "node", lambda j: _pod(j).pop("nodeName")),
    ("extra-toleration", "tolerations",
     lambda j: _pod(j)["tolerations"].append({"key": "node-role.kubernetes.io/control-plane"})),
    ("api-token", "service-account",
     lambda j: _pod(j).update(automountServiceAccountToken=True)),
    ("init-container", "one-container",
     lambda j: _pod(j).update(initContainers=[copy.deepcopy(_c(j))])),
    ("affinity", "pod-fields", lambda j: _pod(j).update(affinity={"nodeAffinity": {}})),
    ("host-aliases", "pod-fields",
     lambda j: _pod(j).update(hostAliases=[{"ip": "10.0.0.1", "hostnames": ["x"]}])),
    ("other-runtime-class", "runtime-class", lambda j: _pod(j).update(runtimeClassName="kata")),
    ("apparmor-annotation", "annotations", lambda j: j["spec"]["template"]["metadata"].update(
        annotations={"container.apparmor.security.beta.kubernetes.io/evidence": "unconfined"})),
    ("gpu-for-evidence", "resources",
     lambda j: _c(j)["resources"]["limits"].update({"nvidia.com/gpu": "1"})),
    ("retried", "job", lambda j: j["spec"].update(backoffLimit=6)),
]


@pytest.mark.parametrize(("name", "rule", "mutate"), HOSTILE, ids=[m[0] for m in HOSTILE])
def test_a_hostile_evidence_job_is_refused_by_its_rule_whoever_creates_it(
    name: str, rule: str, mutate: Mutation
) -> None:
    job = evidence()
    mutate(job)
    as_pod = [] if name in JOB_ONLY else [(pod_of(job), TENANT)]
    for obj, user in [(job, TENANT), *as_pod]:
        refused = cel.rule_names(cel.refusals(policy("gpuguard-jobs"), obj, username=user))
        assert rule in refused
        also = ALSO_REFUSED_BY.get(name, set())
        assert set(refused) - {rule} <= also or "*" in also, refused


BURNIN_HOSTILE: list[tuple[str, str, Mutation]] = [
    ("gpus-do-not-match-the-command", "resources",
     lambda j: _c(j)["resources"]["limits"].update({"nvidia.com/gpu": "1"})),
    ("burnin-with-a-host-path", "volumes", lambda j: _pod(j)["volumes"].append(
        {"name": "host-sys", "hostPath": {"path": "/sys", "type": "Directory"}})),
    ("burnin-as-root", "security-context", lambda j: _c(j)["securityContext"].update(runAsUser=0)),
    ("burnin-adds-a-capability", "capabilities",
     lambda j: _c(j)["securityContext"]["capabilities"].update(add=["DAC_READ_SEARCH"])),
    ("burnin-reason-injection", "command", lambda j: _c(j)["command"].__setitem__(9, "xid-1;sh")),
]


@pytest.mark.parametrize(("name", "rule", "mutate"), BURNIN_HOSTILE,
                         ids=[m[0] for m in BURNIN_HOSTILE])
def test_a_hostile_burnin_job_is_refused_by_its_rule(
    name: str, rule: str, mutate: Mutation
) -> None:
    job = burnin()
    mutate(job)
    assert cel.rule_names(cel.refusals(policy("gpuguard-jobs"), job, username=GPUGUARD)) == [rule]


def test_a_tenants_own_jobs_and_pods_are_not_the_policys_business() -> None:
    job = evidence()
    _pod(job)["serviceAccountName"] = "tenant-ci"
    _c(job).update(command=SHELL)
    assert cel.refusals(policy("gpuguard-jobs"), job, username=TENANT) is None
    del _pod(job)["serviceAccountName"]
    assert cel.refusals(policy("gpuguard-jobs"), job, username=TENANT) is None
    assert cel.refusals(policy("gpuguard-controller-pod"), pod_of(job), username=TENANT) is None


def test_the_policies_are_bound_to_deny_in_gpuguards_namespace_only() -> None:
    for name in ("gpuguard-jobs", "gpuguard-controller-pod"):
        binding = chart.by_name("ValidatingAdmissionPolicyBinding", name)
        assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}
        constraints = policy(name)["spec"]["matchConstraints"]
        assert constraints["namespaceSelector"] == {
            "matchLabels": {"kubernetes.io/metadata.name": chart.NAMESPACE}}
        pods = [r for r in constraints["resourceRules"] if "pods" in r["resources"]]
        assert pods[0]["resources"] == ["pods", "pods/ephemeralcontainers"]
        assert policy(name)["spec"]["failurePolicy"] == "Fail"


# ---- the controller's pod: the only pod that may run as `gpuguard` ---------------------------




def test_the_controller_pod_is_admitted() -> None:
    pod = controller_pod()
    rs = "system:serviceaccount:kube-system:replicaset-controller"
    assert cel.refusals(policy("gpuguard-controller-pod"), pod, username=rs) == []
    assert cel.refusals(policy("gpuguard-jobs"), pod, username=rs) is None


def _cc(pod: Obj) -> Obj:
    container: Obj = pod["spec"]["containers"][0]
    return container


CONTROLLER_HOSTILE: list[tuple[str, str, Mutation]] = [
    ("tenant-image-with-the-token", "controller-container",
     lambda p: _cc(p).update(image="attacker/kubectl:latest")),
    ("shell-command", "controller-command", lambda p: _cc(p).update(command=SHELL)),
    ("poststart-hook", "controller-command",
     lambda p: _cc(p).update(lifecycle={"postStart": {"exec": {"command": SHELL}}})),
    ("exec-liveness", "controller-command",
     lambda p: _cc(p).update(livenessProbe={"exec": {"command": SHELL}})),
    ("exec-readiness", "controller-command",
     lambda p: _cc(p).update(readinessProbe={"exec": {"command": SHELL}})),
    ("pythonwarnings", "controller-env",
     lambda p: _cc(p)["env"].append({"name": "PYTHONWARNINGS", "value": "always"})),
    ("host-path", "controller-volumes", lambda p: p["spec"]["volumes"].append(
        {"name": "root", "hostPath": {"path": "/"}})),
    ("other-configmap-as-xid-overrides", "controller-volumes", lambda p: p["spec"][
        "volumes"].append({"name": "xid-overrides", "configMap": {"name": "someone-elses"}})),
    ("root-user", "controller-privileges",
     lambda p: p["spec"]["securityContext"].update(runAsNonRoot=False)),
]


@pytest.mark.parametrize(("name", "rule", "mutate"), CONTROLLER_HOSTILE,
                         ids=[m[0] for m in CONTROLLER_HOSTILE])
def test_no_other_pod_may_run_with_the_controllers_token(
    name: str, rule: str, mutate: Mutation
) -> None:
    pod = controller_pod()
    mutate(pod)
    refused = cel.refusals(policy("gpuguard-controller-pod"), pod, username=TENANT)
    assert cel.rule_names(refused) == [rule]


# ---- the agent's pod, and the namespace ------------------------------------------------------


def _ac(pod: Obj) -> Obj:
    container: Obj = pod["spec"]["containers"][0]
    return container


def _projected(pod: Obj) -> list[Obj]:
    (volume,) = [v for v in pod["spec"]["volumes"] if "projected" in v]
    sources: list[Obj] = volume["projected"]["sources"]
    return sources


def _token(pod: Obj) -> Obj:
    (token,) = [s["serviceAccountToken"] for s in _projected(pod) if "serviceAccountToken" in s]
    return token


AGENT_HOSTILE: list[tuple[str, str, Mutation]] = [
    ("other-image", "agent-container", lambda p: _ac(p).update(image="attacker/root:latest")),
    ("shell-init-container", "agent-container", lambda p: p["spec"]["initContainers"][0].update(
        image="busybox", command=SHELL)),
    ("exec-liveness", "agent-hooks",
     lambda p: _ac(p).update(livenessProbe={"exec": {"command": SHELL}})),
    ("ld-preload", "agent-hooks",
     lambda p: _ac(p)["env"].append({"name": "LD_PRELOAD", "value": "/host/tmp/x.so"})),
    ("host-root", "agent-volumes",
     lambda p: p["spec"]["volumes"].append({"name": "root", "hostPath": {"path": "/"}})),
    ("other-configmap", "agent-volumes", lambda p: p["spec"]["volumes"].append(
        {"name": "x", "configMap": {"name": "someone-elses"}})),
    ("the-controllers-settings", "agent-volumes", lambda p: p["spec"]["volumes"].append(
        {"name": "xid-overrides", "configMap": {"name": "gpuguard-settings"}})),
    ("writable-etc", "agent-volumes",
     lambda p: [m.update(readOnly=False) for m in _ac(p)["volumeMounts"]
                if m["name"] == "host-etc"]),
    ("auto-mounted-token", "agent-volumes",
     lambda p: p["spec"].update(automountServiceAccountToken=True)),
    ("year-long-token", "agent-volumes", lambda p: _token(p).update(expirationSeconds=31536000)),
    ("token-for-another-audience", "agent-volumes",
     lambda p: _token(p).update(audience="vault")),
    ("other-secret-in-the-projection", "agent-volumes",
     lambda p: _projected(p).append({"secret": {"name": "gpuguard-webhook"}})),
    ("privileged-without-the-option", "agent-privileges",
     lambda p: _ac(p)["securityContext"].update(privileged=True)),
    ("host-pid", "agent-privileges", lambda p: p["spec"].update(hostPID=True)),
]


def test_the_agent_pod_is_admitted() -> None:
    assert cel.refusals(policy("gpuguard-agent-pod"), agent_pod(), username=TENANT) == []
    assert cel.refusals(policy("gpuguard-namespace"), agent_pod(), username=TENANT) == []


def test_the_pods_that_read_the_xid_override_file_are_admitted() -> None:
    values = chart.with_xid_overrides()
    agent, controller = agent_pod(values), controller_pod(values)
    assert "xid-overrides" in [v["name"] for v in agent["spec"]["volumes"]]
    assert "xid-overrides" in [v["name"] for v in controller["spec"]["volumes"]]
    # admitted under the policy rendered with those values: tests/hostile (gpuguard-itself/
    # agent-pod-xid-overrides); the replayed chart here has the default values
    without = cel.refusals(policy("gpuguard-agent-pod"), agent, username=TENANT)
    assert cel.rule_names(without) == ["agent-container", "agent-volumes"]  # not unless set
    rs = "system:serviceaccount:kube-system:replicaset-controller"
    assert cel.refusals(policy("gpuguard-controller-pod"), controller, username=rs) == []


@pytest.mark.parametrize(("name", "rule", "mutate"), AGENT_HOSTILE,
                         ids=[m[0] for m in AGENT_HOSTILE])
def test_nothing_else_runs_as_the_agent(name: str, rule: str, mutate: Mutation) -> None:
    pod = agent_pod()
    mutate(pod)
    refused = cel.refusals(policy("gpuguard-agent-pod"), pod, username=TENANT)
    assert cel.rule_names(refused) == [rule]


def test_only_gpuguards_accounts_run_pods_in_its_namespace() -> None:
    tenant = agent_pod()
    tenant["spec"]["serviceAccountName"] = "default"
    refused = cel.refusals(policy("gpuguard-namespace"), tenant, username=TENANT)
    assert cel.rule_names(refused) == ["namespace"]
    assert cel.refusals(policy("gpuguard-namespace"), controller_pod(), username=TENANT) == []
    assert cel.refusals(policy("gpuguard-namespace"), pod_of(evidence()), username=TENANT) == []


# ---- the GPU-isolation Job (docs/gpu-isolation.md) --------------------------------------------

CARD = "GPU-0a8e0faa-d59d-595d-bf96-0adbb520ef6b"


def gpu_isolation(action: str = "apply") -> Obj:
    return jobs.gpu_isolation_job(NODE, "k", action=action, uuids=(CARD,), image=IMAGE)


@pytest.mark.parametrize("action", ["apply", "undo"])
def test_the_gpu_isolation_job_and_its_pod_are_admitted(action: str) -> None:
    job = gpu_isolation(action)
    assert failed_rules(job) == []
    assert cel.refusals(policy("gpuguard-jobs"), pod_of(job), username=JOB_CONTROLLER) == []


def _mount(job: Obj, name: str) -> Obj:
    (mount,) = [m for m in _c(job)["volumeMounts"] if m["name"] == name]
    return mount


GPU_ISOLATION_HOSTILE: list[tuple[str, str, Mutation]] = [
    ("shell-among-the-uuids", "command", lambda j: _c(j)["command"].insert(6, "sh")),
    ("unknown-action", "command", lambda j: _c(j)["command"].__setitem__(2, "exec")),
    ("not-a-uuid", "command", lambda j: _c(j)["command"].__setitem__(6, "$(id)")),
    ("ld-preload", "env", lambda j: _c(j)["env"].append({"name": "LD_PRELOAD", "value": "/x.so"})),
    ("every-gpu-visible", "env", lambda j: _c(j)["env"][0].update(value="all")),
    ("driver-capabilities-beyond-utility", "env", lambda j: _c(j)["env"][1].update(value="all")),
    ("other-runtime", "runtime-class", lambda j: _pod(j).update(runtimeClassName="runc-priv")),
    ("writable-var-log", "mounts", lambda j: _mount(j, "host-var-log").update(readOnly=False)),
    ("a-capability", "capabilities",
     lambda j: _c(j)["securityContext"]["capabilities"].update(add=["SYS_ADMIN"])),
    ("host-etc", "volumes", lambda j: _pod(j)["volumes"][0]["hostPath"].update(path="/etc")),
]


@pytest.mark.parametrize(("name", "rule", "mutate"), GPU_ISOLATION_HOSTILE,
                         ids=[m[0] for m in GPU_ISOLATION_HOSTILE])
def test_any_other_gpu_isolation_shape_is_refused(name: str, rule: str, mutate: Mutation) -> None:
    job = gpu_isolation()
    mutate(job)
    assert failed_rules(job) == [rule]


def xid_reading_isolation() -> Obj:
    """The GPU-isolation Job of a controller with the cluster's Xid override file."""
    return jobs.gpu_isolation_job(NODE, "k", action="apply", uuids=(CARD, CARD2), image=IMAGE,
                                  xid_overrides=True)


CARD2 = "GPU-1b9f1abb-e6ae-4a6e-8c07-1bec631f0c7c"


def test_the_gpu_isolation_job_reading_the_xid_override_file_is_admitted() -> None:
    job = xid_reading_isolation()
    assert "--xid-overrides" in _c(job)["command"]
    assert failed_rules(job) == []
    assert failed_rules(defaulted(job)) == []
    assert cel.refusals(policy("gpuguard-jobs"), pod_of(job), username=JOB_CONTROLLER) == []


def _xid_volume(job: Obj) -> Obj:
    (volume,) = [v for v in _pod(job)["volumes"] if v["name"] == "xid-overrides"]
    return volume


def _without_flag(job: Obj) -> None:
    command = _c(job)["command"]
    at = command.index("--xid-overrides")
    del command[at:at + 2]


def _hostpath_named_xid_overrides(job: Obj) -> None:
    volume = _xid_volume(job)
    del volume["configMap"]
    volume["hostPath"] = {"path": "/etc", "type": "Directory"}


XID_OVERRIDES_HOSTILE: list[tuple[str, list[str], Mutation]] = [
    ("another-configmap", ["volumes"],
     lambda j: _xid_volume(j)["configMap"].update(name="gpuguard-settings")),
    ("another-key", ["volumes"], lambda j: _xid_volume(j)["configMap"]["items"][0].update(
        key="settings.yaml")),
    ("every-key", ["volumes"], lambda j: _xid_volume(j)["configMap"].pop("items")),
    ("another-mount-path", ["mounts"],
     lambda j: _mount(j, "xid-overrides").update(mountPath="/host/etc/gpuguard-xid")),
    ("writable", ["mounts"], lambda j: _mount(j, "xid-overrides").update(readOnly=False)),
    ("another-file", ["command"], lambda j: _c(j)["command"].__setitem__(-3, "/host/etc/shadow")),
    ("a-hostpath-under-its-name", ["volumes"], _hostpath_named_xid_overrides),
    ("the-mount-without-the-flag", ["volumes", "mounts"], _without_flag),
]


@pytest.mark.parametrize(("name", "rules", "mutate"), XID_OVERRIDES_HOSTILE,
                         ids=[m[0] for m in XID_OVERRIDES_HOSTILE])
def test_the_xid_override_file_is_the_only_configmap_a_gpu_isolation_job_reads(
    name: str, rules: list[str], mutate: Mutation
) -> None:
    job = xid_reading_isolation()
    mutate(job)
    assert failed_rules(job) == rules


def test_no_other_job_reads_the_xid_override_file() -> None:
    reading = xid_reading_isolation()
    for job in (evidence(), burnin()):
        _pod(job)["volumes"].append(_xid_volume(reading))
        _c(job).setdefault("volumeMounts", []).append(_mount(reading, "xid-overrides"))
        assert failed_rules(job) == ["volumes", "mounts"]


def test_only_the_gpu_isolation_job_may_write_etc_gpuguard() -> None:
    job = evidence()
    _pod(job)["volumes"].append(
        {"name": "host-gpuguard",
         "hostPath": {"path": "/etc/gpuguard", "type": "DirectoryOrCreate"}}
    )
    _c(job)["volumeMounts"].append(
        {"name": "host-gpuguard", "mountPath": "/host/etc/gpuguard", "readOnly": False}
    )
    assert failed_rules(job) == ["volumes", "mounts"]


# ---- a returning GPU's own burn-in ------------------------------------------------------------


def _var(job: Obj, name: str) -> Obj:
    (var,) = [e for e in _c(job)["env"] if e["name"] == name]
    return var


def test_the_burnin_of_one_gpu_and_its_pod_are_admitted() -> None:
    job = gpu_burnin()
    assert _c(job)["command"][-2:] == ["--uuid", CARD]
    assert failed_rules(job) == []
    assert cel.refusals(policy("gpuguard-jobs"), pod_of(job), username=JOB_CONTROLLER) == []


GPU_BURNIN_HOSTILE: list[tuple[str, str, Mutation]] = [
    ("every-gpu-visible", "env", lambda j: _var(j, "NVIDIA_VISIBLE_DEVICES").update(value="all")),
    ("another-gpu-visible", "env",
     lambda j: _var(j, "NVIDIA_VISIBLE_DEVICES").update(value="GPU-11111111-2222")),
    ("more-than-one-gpu", "command", lambda j: _c(j)["command"].__setitem__(5, "2")),
    ("not-a-uuid", "command", lambda j: (_c(j)["command"].__setitem__(9, "$(id)"),
                                         _var(j, "NVIDIA_VISIBLE_DEVICES").update(value="$(id)"))),
    ("a-device-plugin-gpu-too", "resources",
     lambda j: _c(j)["resources"]["limits"].update({"nvidia.com/gpu": "1"})),
]


@pytest.mark.parametrize(("name", "rule", "mutate"), GPU_BURNIN_HOSTILE,
                         ids=[m[0] for m in GPU_BURNIN_HOSTILE])
def test_any_other_gpu_burnin_shape_is_refused(name: str, rule: str, mutate: Mutation) -> None:
    job = gpu_burnin()
    mutate(job)
    assert failed_rules(job) == [rule]
