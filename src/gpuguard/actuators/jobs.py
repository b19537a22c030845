"""The Jobs gpuguard runs on an isolated node, and reading their results.

Both Jobs are pinned with ``nodeName`` (so they run on the cordoned node on purpose, as the
seed's evidence Job did) and have exactly the shape the ValidatingAdmissionPolicy under
``deploy/`` admits from gpuguard's service account — anything else is refused by the API
server. The evidence Job runs unprivileged: no hostPID, no hostNetwork, every capability
dropped but DAC_READ_SEARCH, host paths mounted read-only. Its result is the container's
termination message (≤ 4 KiB), so reading it needs no log access.

Names are derived from the node and the isolation time: a crash between creating a Job and
recording it leaves a Job the next tick finds again (create → AlreadyExists is success).
"""

from __future__ import annotations

import hashlib
from enum import StrEnum
from typing import Any, cast

from lightkube import Client
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Pod

from gpuguard.actuators import api_errors
from gpuguard.errors import ConflictError, SourceError
from gpuguard.model import annotation_keys
from gpuguard.model import jobs as job_model

PART_OF = "gpuguard"
JOB_KIND_LABEL = "gpuguard.io/job"
NODE_LABEL = "gpuguard.io/node"
BURNIN_NODE_LABEL = annotation_keys.BURNIN_NODE_LABEL  # the onboarding gate looks for it
EVIDENCE_SERVICE_ACCOUNT = "gpuguard-evidence"
HOST_PATHS = {"sys": "/sys", "var-log": "/var/log", "proc": "/proc", "etc": "/etc"}


class JobKind(StrEnum):
    EVIDENCE = "evidence"
    BURNIN = "burnin"
    GPU_ISOLATION = "gpu-isolation"


def job_name(kind: JobKind, node: str, isolated_at: str) -> str:
    """``gpuguard-evidence-<node>-<hash>``, at most 63 characters, stable per isolation."""
    digest = hashlib.sha256(f"{node}/{isolated_at}".encode()).hexdigest()[:8]
    return f"gpuguard-{kind}-{node[: 63 - len(kind) - 19]}-{digest}"


def _labels(kind: JobKind, node: str) -> dict[str, str]:
    return {"app.kubernetes.io/part-of": PART_OF, JOB_KIND_LABEL: str(kind), NODE_LABEL: node}


def evidence_job(
    node: str, isolated_at: str, *, image: str, namespace: str = "gpuguard"
) -> dict[str, Any]:
    """The evidence Job manifest (batch/v1) for one isolation of ``node``."""
    mounts = [
        {"name": f"host-{name}", "mountPath": f"/host{path}", "readOnly": True}
        for name, path in HOST_PATHS.items()
    ]
    volumes = [
        {"name": f"host-{name}", "hostPath": {"path": path, "type": "Directory"}}
        for name, path in HOST_PATHS.items()
    ]
    container = {
        "name": "evidence",
        "image": image,
        "command": [
            "gpuguard", "evidence", "--root", "/host", "--node", node,
            "--summary-file", "/dev/termination-log",
        ],
        "securityContext": {
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsUser": 0,
            "capabilities": {"drop": ["ALL"], "add": ["DAC_READ_SEARCH"]},
        },
        "resources": {
            "requests": {"cpu": "100m", "memory": "64Mi"},
            "limits": {"cpu": "500m", "memory": "256Mi"},
        },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "volumeMounts": mounts,
    }
    return _job(JobKind.EVIDENCE, node, isolated_at, namespace, container, volumes)


BURNIN_DEADLINE_S = 90 * 60
"""A memory test (``dcgmi diag -r 4``) takes tens of minutes, up to ~45 on a 4-GPU Hopper."""
BURNIN_MODE_FLAG = {"matmul": "matmul", "matmul+memtest": "memory"}
"""``model.restore.BurnInMode`` -> ``gpuguard burnin --mode``: the memory mode is DCGM's level-4
diagnostic (memtest plus its stress tests) or, without DCGM, the pattern test."""


def burnin_key(isolated_at: str, boot_id: str, mode: str, reset_done: str | None = None) -> str:
    """What one burn-in tests: this isolation, on this boot, after this reset (if any), in
    this mode (``model.restore.BurnInMode``)."""
    return f"{isolated_at}/{boot_id}/{reset_done or ''}/{mode}"


def burnin_job(
    node: str,
    isolated_at: str,
    boot_id: str,
    *,
    gpus: int,
    mode: str,
    image: str,
    reason: str | None = None,
    reset_done: str | None = None,
    namespace: str = "gpuguard",
) -> dict[str, Any]:
    """The burn-in Job manifest (batch/v1): ``gpuguard burnin --summary`` on all ``gpus`` GPUs.

    Named per isolation, boot, reset and mode (``burnin_key``), so a burn-in that failed is
    run again only after another power cycle or reset; the boot ID it tests is in the
    ``gpuguard.io/boot-id`` annotation. No host path: the GPUs come from the device plugin.
    """
    command = ["gpuguard", "burnin", "--summary-file", "/dev/termination-log"]
    command += ["--expected-gpus", str(gpus)]
    command += ["--mode", BURNIN_MODE_FLAG[mode]]
    if reason and reason.startswith("xid-"):
        command += ["--reason", reason]
    container = {
        "name": "burnin",
        "image": image,
        "command": command,
        "env": [{"name": "CUDA_CACHE_DISABLE", "value": "1"}],  # read-only root filesystem
        "securityContext": {
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "resources": {
            "requests": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": str(gpus)},
            "limits": {"memory": "32Gi", "nvidia.com/gpu": str(gpus)},
        },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    key = burnin_key(isolated_at, boot_id, mode, reset_done)
    job = _job(JobKind.BURNIN, node, key, namespace, container, [])
    job["metadata"]["labels"][BURNIN_NODE_LABEL] = node
    job["spec"]["template"]["metadata"]["labels"][BURNIN_NODE_LABEL] = node
    job["metadata"]["annotations"] = {
        annotation_keys.ISOLATED_AT: isolated_at,
        annotation_keys.BOOT_ID: boot_id,
        **({annotation_keys.RESET_DONE: reset_done} if reset_done else {}),
    }
    job["spec"]["activeDeadlineSeconds"] = BURNIN_DEADLINE_S
    return job


GPU_ISOLATION_HOST_PATHS = {"gpuguard": ("/etc/gpuguard", False), "var-log": ("/var/log", True)}
"""The isolation Job's host paths: the exclusion list it writes (``/etc/gpuguard``, created if
missing) and the kernel log it reads to confirm the fault (read-only)."""


def gpu_isolation_job(
    node: str,
    key: str,
    *,
    action: str,
    uuids: tuple[str, ...],
    image: str,
    namespace: str = "gpuguard",
) -> dict[str, Any]:
    """The GPU-isolation Job (batch/v1): ``gpuguard gpu-isolate apply|undo`` for ``uuids`` on
    ``node`` (docs/gpu-isolation.md). It reaches the GPUs it acts on through the NVIDIA
    container runtime (``runtimeClassName: nvidia``, ``NVIDIA_VISIBLE_DEVICES`` = those UUIDs,
    ``utility`` capability: nvidia-smi only) — never through the device plugin, which no longer
    offers them — and runs as root without any capability: NVML's compute-mode setter needs
    root. Named by ``key`` (what it applies, on which boot, after which application)."""
    command = ["gpuguard", "gpu-isolate", action, "--root", "/host"]
    for uuid in uuids:
        command += ["--uuid", uuid]
    command += ["--summary-file", "/dev/termination-log"]
    container = {
        "name": "gpu-isolation",
        "image": image,
        "command": command,
        "env": [
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": ",".join(uuids)},
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"},
        ],
        "securityContext": {
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsUser": 0,
            "capabilities": {"drop": ["ALL"]},
        },
        "resources": {
            "requests": {"cpu": "50m", "memory": "32Mi"},
            "limits": {"cpu": "200m", "memory": "128Mi"},
        },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "volumeMounts": [
            {"name": f"host-{name}", "mountPath": f"/host{path}", "readOnly": read_only}
            for name, (path, read_only) in GPU_ISOLATION_HOST_PATHS.items()
        ],
    }
    volumes = [
        {
            "name": f"host-{name}",
            "hostPath": {"path": path, "type": "Directory" if read_only else "DirectoryOrCreate"},
        }
        for name, (path, read_only) in GPU_ISOLATION_HOST_PATHS.items()
    ]
    job = _job(JobKind.GPU_ISOLATION, node, key, namespace, container, volumes)
    job["spec"]["template"]["spec"]["runtimeClassName"] = "nvidia"
    job["metadata"]["annotations"] = {annotation_keys.GPU_ISOLATED: key}
    job["spec"]["activeDeadlineSeconds"] = 120
    return job


def _job(
    kind: JobKind,
    node: str,
    isolated_at: str,
    namespace: str,
    container: dict[str, Any],
    volumes: list[dict[str, Any]],
) -> dict[str, Any]:
    labels = _labels(kind, node)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(kind, node, isolated_at),
            "namespace": namespace,
            "labels": labels,
            "annotations": {"gpuguard.io/isolated-at": isolated_at},
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": 600,
            "ttlSecondsAfterFinished": 7 * 86400,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeName": node,
                    "restartPolicy": "Never",
                    "serviceAccountName": EVIDENCE_SERVICE_ACCOUNT,
                    "automountServiceAccountToken": False,
                    "hostPID": False,
                    "hostNetwork": False,
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }


class Jobs:
    """Creates gpuguard's Jobs and reads their pods' termination messages."""

    def __init__(self, client: Client, namespace: str = "gpuguard") -> None:
        self._client = client
        self._namespace = namespace

    def create(self, manifest: dict[str, Any]) -> bool:
        """Create the Job; False when it already exists (an earlier tick made it)."""
        job = cast(Job, Job.from_dict(manifest))
        try:
            with api_errors.translated(f"creating Job {manifest['metadata']['name']}"):
                self._client.create(job, namespace=self._namespace)
        except ConflictError:
            return False
        return True

    def result(self, name: str) -> job_model.JobResult:
        """The state of the Job's pod and its termination message, if it ended."""
        with api_errors.translated(f"reading the pods of Job {name}", SourceError):
            pods = list(
                self._client.list(Pod, namespace=self._namespace, labels={"job-name": name})
            )
        if not pods:
            return job_model.JobResult(job_model.JobState.ABSENT)
        return _pod_result(pods[-1])


def _pod_result(pod: Pod) -> job_model.JobResult:
    status = pod.status
    phase = status.phase if status else None
    statuses = (status.containerStatuses or []) if status else []
    terminated = statuses[0].state.terminated if statuses and statuses[0].state else None
    message = terminated.message if terminated else None
    started = status.startTime if status else None
    if phase == "Succeeded":
        return job_model.JobResult(job_model.JobState.SUCCEEDED, message, started_at=started)
    if phase == "Failed":
        reason = terminated.reason if terminated else (status.reason if status else None)
        return job_model.JobResult(
            job_model.JobState.FAILED, message, detail=reason or "", started_at=started
        )
    return job_model.JobResult(job_model.JobState.RUNNING, started_at=started)
