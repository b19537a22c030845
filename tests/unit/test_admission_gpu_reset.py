"""The GPU-reset Job in the ``gpuguard-jobs`` allow-list (docs/security.md#the-gpu-reset-job):
with ``remediation.gpu_reset_pools`` set, gpuguard's exact shape — ``nvidia-smi -r -i`` on one
card, root with CAP_SYS_ADMIN only, that card alone visible — its defaulted form and its pod
are admitted; without the opt-in, and in any other shape (another node, command, card,
capability, a host path), it is refused by the rule named for it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests import cel, chart
from tests.admission import (
    CARD,
    GPUGUARD,
    JOB_CONTROLLER,
    defaulted,
    evidence,
    gpu_reset,
    pod_of,
    policy,
    policy_with,
)
from tests.admission import container as _c
from tests.admission import pod_spec as _pod

Obj = dict[str, Any]
Mutation = Callable[[Obj], Any]
ON = chart.with_gpu_reset()


def refused(job: Obj, values: dict[str, Any] = ON, user: str = GPUGUARD) -> list[str]:
    answer = cel.refusals(policy_with("gpuguard-jobs", values), job, username=user)
    assert answer is not None  # the policy applies to it
    return cel.rule_names(answer)



def test_the_reset_job_its_defaulted_form_and_its_pod_are_admitted_with_the_opt_in() -> None:
    job = gpu_reset()
    assert _c(job)["command"] == ["nvidia-smi", "-r", "-i", CARD]
    assert refused(job) == []
    assert refused(defaulted(job)) == []
    assert refused(pod_of(job), user=JOB_CONTROLLER) == []


def test_without_the_opt_in_the_reset_job_is_refused() -> None:
    job = gpu_reset()
    assert cel.rule_names(cel.refusals(policy("gpuguard-jobs"), job, username=GPUGUARD)) == [
        "command", "env", "capabilities", "security-context"]


def _other_node(job: Obj) -> None:
    _pod(job)["nodeName"] = "gpu-node-c"


def _var(job: Obj) -> Obj:
    found: list[Obj] = [e for e in _c(job)["env"] if e["name"] == "NVIDIA_VISIBLE_DEVICES"]
    (var,) = found
    return var


OTHER = "GPU-1b9f1abb-e6ae-4a6e-8c07-1bec631f0c7c"
NOT_A_RESET = ["command", "env", "capabilities", "security-context"]
"""Not `nvidia-smi -r -i GPU-...`: not the reset Job, so none of its allowances apply."""
HOSTILE: list[tuple[str, list[str], Mutation]] = [
    ("on-another-node", ["node"], _other_node),
    ("a-shell", NOT_A_RESET, lambda j: _c(j).update(command=["sh", "-c", "nvidia-smi -r"])),
    ("every-gpu", NOT_A_RESET, lambda j: _c(j).update(command=["nvidia-smi", "-r"])),
    ("another-nvidia-smi-action", NOT_A_RESET,
     lambda j: _c(j)["command"].__setitem__(1, "--gpu-reset")),
    ("not-a-uuid", ["command", "env"], lambda j: (_c(j)["command"].__setitem__(3, "$(id)"),)),
    ("args-after-the-command", ["command"], lambda j: _c(j).update(args=["-q"])),
    ("another-card-visible", ["env"], lambda j: _var(j).update(value=OTHER)),
    ("every-card-visible", ["env"], lambda j: _var(j).update(value="all")),
    ("no-visible-devices", ["env"], lambda j: _c(j)["env"].remove(_var(j))),
    ("ld-preload", ["env"], lambda j: _c(j)["env"].append({"name": "LD_PRELOAD",
                                                           "value": "/x.so"})),
    ("privileged", ["privileges"], lambda j: _c(j)["securityContext"].update(privileged=True)),
    ("another-capability", ["capabilities"],
     lambda j: _c(j)["securityContext"]["capabilities"]["add"].append("SYS_MODULE")),
    ("host-dev", ["volumes", "mounts"], lambda j: (
        _pod(j)["volumes"].append({"name": "dev", "hostPath": {"path": "/dev",
                                                                "type": "Directory"}}),
        _c(j).update(volumeMounts=[{"name": "dev", "mountPath": "/dev"}]))),
    ("host-pid", ["host-namespaces"], lambda j: _pod(j).update(hostPID=True)),
    ("another-image", ["image"], lambda j: _c(j).update(image="attacker/smi:latest")),
    ("another-runtime", ["runtime-class"], lambda j: _pod(j).update(runtimeClassName="runc")),
    ("with-a-token", ["service-account"],
     lambda j: _pod(j).update(automountServiceAccountToken=True)),
]


@pytest.mark.parametrize(("name", "rules", "mutate"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_any_other_reset_shape_is_refused(name: str, rules: list[str], mutate: Mutation) -> None:
    job = gpu_reset()
    mutate(job)
    assert refused(job) == rules


def test_no_other_job_gets_sys_admin_with_the_opt_in() -> None:
    job = evidence()
    _c(job)["securityContext"]["capabilities"]["add"] = ["SYS_ADMIN"]
    assert refused(job) == ["capabilities"]
