"""The Jobs gpuguard runs on an isolated node, and reading their results.

Both Jobs are pinned with ``nodeName`` (so they run on the cordoned node on purpose) and have
exactly the shape the ``gpuguard-jobs`` ValidatingAdmissionPolicy under ``deploy/`` admits —
anything else running as gpuguard's service accounts is refused by the API server (see
``docs/security.md``). ``gpuguard manifest job`` prints them. The evidence Job runs
unprivileged: no host namespaces, every capability dropped but DAC_READ_SEARCH (kern.log is
``syslog:adm 0640`` on Debian/Ubuntu), only ``/sys``, ``/var/log`` and the boot ID mounted,
read-only. ``nvidia-smi`` comes from the NVIDIA container toolkit (``runtimeClassName``,
``NVIDIA_VISIBLE_DEVICES=all``, ``NVIDIA_DRIVER_CAPABILITIES=utility``: the toolkit mounts the
driver's utilities into the container), the journal is read by the image's own journalctl
from the host's journal files. Its result is the container's termination message (≤ 4 KiB),
so reading it needs no log access.

Names are derived from the node and the isolation time: a crash between creating a Job and
recording it leaves a Job the next tick finds again (create → AlreadyExists is success).
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, cast

from lightkube import ApiError, Client
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Pod

from gpuguard.clients import kube as api_errors
from gpuguard.errors import ConflictError, InputError, SourceError
from gpuguard.model import annotation_keys
from gpuguard.model import change as change_model
from gpuguard.model import jobs as job_model
from gpuguard.model import remediation as remediation_model
from gpuguard.model import return_to_pool as return_model

PART_OF = "gpuguard"
JOB_KIND_LABEL = "gpuguard.io/job"
NODE_LABEL = "gpuguard.io/node"
BURNIN_NODE_LABEL = annotation_keys.BURNIN_NODE_LABEL  # the onboarding gate looks for it
EVIDENCE_SERVICE_ACCOUNT = "gpuguard-evidence"
BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
HOST_PATHS = {"sys": ("/sys", "Directory"), "var-log": ("/var/log", "Directory"),
              "boot-id": (BOOT_ID_FILE, "File")}  # fmt: skip
"""Volume name -> (host path, hostPath type): what the evidence collector reads, nothing more."""
TOOLKIT_ENV = {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "utility"}
"""The NVIDIA container toolkit's variables: every GPU's device node and only the driver's
utilities (nvidia-smi), no compute libraries; see NVIDIA's container toolkit docs
("Driver capabilities")."""
BURNIN_ENV = {"CUDA_CACHE_DISABLE": "1"}  # read-only root filesystem: no JIT cache to write
BURNIN_UID = 65532  # any non-root uid: /dev/nvidia* are 0666


class JobKind(StrEnum):
    EVIDENCE = "evidence"
    BURNIN = "burnin"
    GPU_ISOLATION = "gpu-isolation"
    CHANGE = "change"
    GPU_RESET = "gpu-reset"


def job_name(kind: JobKind, node: str, isolated_at: str) -> str:
    """``gpuguard-evidence-<node>-<hash>``, at most 63 characters, stable per isolation."""
    digest = hashlib.sha256(f"{node}/{isolated_at}".encode()).hexdigest()[:8]
    return f"gpuguard-{kind}-{node[: 63 - len(kind) - 19]}-{digest}"


def _labels(kind: JobKind, node: str) -> dict[str, str]:
    return {"app.kubernetes.io/part-of": PART_OF, JOB_KIND_LABEL: str(kind), NODE_LABEL: node}


def _env(values: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": name, "value": value} for name, value in values.items()]


def evidence_job(
    node: str,
    isolated_at: str,
    *,
    image: str,
    namespace: str = "gpuguard",
    runtime_class: str | None = None,
    deadline: timedelta,
) -> dict[str, Any]:
    """The evidence Job manifest (batch/v1) for one isolation of ``node``; the Job controller
    ends it after ``deadline`` (``controller.evidence_deadline``)."""
    mounts = [
        {"name": f"host-{name}", "mountPath": f"/host{path}", "readOnly": True}
        for name, (path, _) in HOST_PATHS.items()
    ]
    volumes = [
        {"name": f"host-{name}", "hostPath": {"path": path, "type": kind}}
        for name, (path, kind) in HOST_PATHS.items()
    ]
    container = {
        "name": "evidence",
        "image": image,
        "command": [
            "gpuguard", "evidence", "--root", "/host", "--node", node,
            "--summary-file", "/dev/termination-log",
        ],
        "env": _env(TOOLKIT_ENV),
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
    job = _job(JobKind.EVIDENCE, node, isolated_at, namespace, container, volumes, runtime_class)
    job["spec"]["activeDeadlineSeconds"] = _seconds(deadline)
    return job


BURNIN_MODE_FLAG = {"matmul": "matmul", "matmul+memtest": "memory"}
"""``model.return_to_pool.BurninMode`` -> ``gpuguard burnin --mode``: the memory mode is DCGM's
level-4 diagnostic (memtest plus its stress tests) or, without DCGM, the pattern test."""


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
    runtime_class: str | None = None,
    inspected: str | None = None,
    uuid: str | None = None,
    deadline: timedelta,
) -> dict[str, Any]:
    """The burn-in Job manifest (batch/v1): ``gpuguard burnin --summary`` on all ``gpus`` GPUs.

    Named per isolation, boot, reset, inspection and mode (``model.return_to_pool.burnin_key``), so
    a burn-in that failed is run again only after another power cycle, reset or inspection;
    the boot ID it tests is in the ``gpuguard.io/boot-id`` annotation. No host path: the GPUs
    come from the device plugin — but for ``uuid``, one isolated GPU that the device plugin
    no longer offers: then the NVIDIA runtime gives it that GPU alone
    (``NVIDIA_VISIBLE_DEVICES=<uuid>``, ``compute,utility``), and the Job does not carry the
    node's burn-in label (the onboarding gate's smoke test is a whole node's burn-in).
    """
    command = ["gpuguard", "burnin", "--summary-file", "/dev/termination-log"]
    command += ["--expected-gpus", str(gpus)]
    command += ["--mode", BURNIN_MODE_FLAG[mode]]
    if reason and reason.startswith("xid-"):
        command += ["--reason", reason]
    env = BURNIN_ENV
    if uuid:
        command += ["--uuid", uuid]
        env = env | {"NVIDIA_VISIBLE_DEVICES": uuid,
                     "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}
    gpu_request = {} if uuid else {"nvidia.com/gpu": str(gpus)}
    container = {
        "name": "burnin",
        "image": image,
        "command": command,
        "env": _env(env),
        "securityContext": {
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": BURNIN_UID,
            "capabilities": {"drop": ["ALL"]},
        },
        "resources": {
            "requests": {"cpu": "2", "memory": "8Gi", **gpu_request},
            "limits": {"memory": "32Gi", **gpu_request},
        },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    key = return_model.burnin_key(isolated_at, boot_id, mode, reset_done, inspected)
    job = _job(JobKind.BURNIN, node, key, namespace, container, [], runtime_class)
    if not uuid:
        job["metadata"]["labels"][BURNIN_NODE_LABEL] = node
        job["spec"]["template"]["metadata"]["labels"][BURNIN_NODE_LABEL] = node
    job["metadata"]["annotations"] = {
        annotation_keys.ISOLATED_AT: isolated_at,
        annotation_keys.BOOT_ID: boot_id,
        **({annotation_keys.RESET_DONE: reset_done} if reset_done else {}),
    }
    job["spec"]["activeDeadlineSeconds"] = _seconds(deadline)
    return job


def change_burnin_name(node: str, change: str, boot_id: str, mode: str) -> str:
    """The burn-in Job after change ``change`` on the node's boot ``boot_id``."""
    key = return_model.burnin_key(_change_key(change), boot_id, mode)
    return job_name(JobKind.BURNIN, node, key)


def change_burnin_job(
    node: str,
    change: str,
    boot_id: str,
    *,
    gpus: int,
    mode: str,
    image: str,
    namespace: str = "gpuguard",
    runtime_class: str | None = None,
    deadline: timedelta,
) -> dict[str, Any]:
    """The burn-in after a declared change (docs/change-management.md): the same Job as after
    a repair, so the same admission rules admit it, named by the change and the boot it tests
    (a failed one is not run again on that boot); annotated with the change, not an
    isolation."""
    job = burnin_job(node, _change_key(change), boot_id, gpus=gpus, mode=mode, image=image,
                     namespace=namespace, runtime_class=runtime_class, deadline=deadline)
    job["metadata"]["annotations"] = {annotation_keys.CHANGE: change,
                                      annotation_keys.BOOT_ID: boot_id}
    return job


def _seconds(deadline: timedelta) -> int:
    return max(1, int(deadline.total_seconds()))  # the API takes whole seconds, at least 1


def _change_key(change: str) -> str:
    return f"change/{change}"


CHANGE_SERVICE_ACCOUNT = "gpuguard-change"
"""The change Job's account: no RBAC, no token; its own admission policy
(``gpuguard-change-jobs``) admits only the admin's templates for it."""


def change_job_name(node: str, change: str, boot_id: str) -> str:
    """The change's Job on the node, for the boot it was requested on."""
    return job_name(JobKind.CHANGE, node, f"{_change_key(change)}/{boot_id}")


def change_job(
    node: str,
    change: str,
    boot_id: str,
    template: change_model.JobTemplate,
    *,
    env: dict[str, str],
    deadline_s: int,
    namespace: str = "gpuguard",
) -> dict[str, Any]:
    """A declared change's Job (method job, docs/change-management.md): the admin's approved
    template — its image running ``/bin/sh -c SCRIPT``, privileged (with the host's PID
    namespace) only when the template says so — pinned to the node, with the change's name
    and versions in ``env`` (``GPUGUARD_CHANGE``, ``GPUGUARD_DRIVER``, ``GPUGUARD_KERNEL``).
    Everything else is gpuguard's fixed shape; the admission policy checks both."""
    privileged = template.privileged
    security: dict[str, Any] = {"privileged": privileged, "allowPrivilegeEscalation": privileged}
    if not privileged:
        security["capabilities"] = {"drop": ["ALL"]}
    container = {
        "name": "change",
        "image": template.image,
        "command": ["/bin/sh", "-c", template.script],
        "env": _env(env),
        "securityContext": security,
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    job = _job(JobKind.CHANGE, node, f"{_change_key(change)}/{boot_id}", namespace, container,
               [], None)
    pod = job["spec"]["template"]["spec"]
    pod["serviceAccountName"] = CHANGE_SERVICE_ACCOUNT
    pod["hostPID"] = privileged
    for labels in (job["metadata"]["labels"], job["spec"]["template"]["metadata"]["labels"]):
        labels[change_model.TEMPLATE_LABEL] = template.name
    job["metadata"]["annotations"] = {annotation_keys.CHANGE: change,
                                      annotation_keys.BOOT_ID: boot_id}
    job["spec"]["activeDeadlineSeconds"] = deadline_s
    return job


XID_OVERRIDES_CONFIG_MAP = "gpuguard-xid-overrides"
XID_OVERRIDES_KEY = "xid-overrides.yaml"
XID_OVERRIDES_DIR = "/etc/gpuguard-xid"
XID_OVERRIDES_FILE = f"{XID_OVERRIDES_DIR}/{XID_OVERRIDES_KEY}"
"""The cluster's Xid class override file as the Helm chart ships it (values ``xidOverrides``):
its own ConfigMap, mounted read-only, that key only, at the same path in the controller, the
agent and the GPU-isolation Job (docs/security.md)."""


def _xid_overrides_volume() -> tuple[dict[str, Any], dict[str, Any]]:
    """The ConfigMap volume of the override file and its read-only mount."""
    name = "xid-overrides"
    items = [{"key": XID_OVERRIDES_KEY, "path": XID_OVERRIDES_KEY}]
    volume = {"name": name, "configMap": {"name": XID_OVERRIDES_CONFIG_MAP, "items": items}}
    return volume, {"name": name, "mountPath": XID_OVERRIDES_DIR, "readOnly": True}


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
    runtime_class: str | None = "nvidia",
    xid_overrides: bool = False,
) -> dict[str, Any]:
    """The GPU-isolation Job (batch/v1): ``gpuguard gpu-isolate apply|undo`` for ``uuids`` on
    ``node`` (docs/gpu-isolation.md). It reaches the GPUs it acts on through the NVIDIA
    container runtime (``runtimeClassName: nvidia``, ``NVIDIA_VISIBLE_DEVICES`` = those UUIDs,
    ``utility`` capability: nvidia-smi only) — never through the device plugin, which no longer
    offers them — and runs as root without any capability: NVML's compute-mode setter needs
    root. Named by ``key`` (what it applies, on which boot, after which application).

    With ``xid_overrides`` (the controller has ``controller.xid_overrides``) it reads the
    cluster's override file (``XID_OVERRIDES_FILE``), so the kernel-log Xid that confirms a
    card's fault is hardware in the controller's classes, not only in the packaged ones."""
    command = ["gpuguard", "gpu-isolate", action, "--root", "/host"]
    for uuid in uuids:
        command += ["--uuid", uuid]
    if xid_overrides:
        command += ["--xid-overrides", XID_OVERRIDES_FILE]
    command += ["--summary-file", "/dev/termination-log"]
    mounts: list[dict[str, Any]] = [
        {"name": f"host-{name}", "mountPath": f"/host{path}", "readOnly": read_only}
        for name, (path, read_only) in GPU_ISOLATION_HOST_PATHS.items()
    ]
    volumes: list[dict[str, Any]] = [
        {
            "name": f"host-{name}",
            "hostPath": {"path": path, "type": "Directory" if read_only else "DirectoryOrCreate"},
        }
        for name, (path, read_only) in GPU_ISOLATION_HOST_PATHS.items()
    ]
    if xid_overrides:
        volume, mount = _xid_overrides_volume()
        volumes.append(volume)
        mounts.append(mount)
    container = {
        "name": "gpu-isolate",  # the command's name, as every gpuguard Job (admission policy)
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
        "volumeMounts": mounts,
    }
    job = _job(JobKind.GPU_ISOLATION, node, key, namespace, container, volumes, runtime_class)
    job["metadata"]["annotations"] = {annotation_keys.GPU_ISOLATED: key}
    job["spec"]["activeDeadlineSeconds"] = 120
    return job


GPU_RESET_CAPABILITY = "SYS_ADMIN"
"""The one capability the reset Job adds: ``nvidia-smi -r`` "requires root" (nvidia-smi(1),
https://manpages.ubuntu.com/manpages/plucky/man1/nvidia-smi.1.html) and the driver's root test
is the capability, not the uid (NVIDIA open-gpu-kernel-modules,
``kernel-open/common/inc/nv-linux.h``: ``#define NV_IS_SUSER() capable(CAP_SYS_ADMIN)``,
``os_is_administrator`` in ``kernel-open/nvidia/os-interface.c``)."""
GPU_RESET_DEADLINE_S = 120  # a reset takes seconds; one that hangs has failed (docs/remediation.md)


def gpu_reset_job(
    node: str,
    isolated_at: str,
    *,
    uuid: str,
    image: str,
    namespace: str = "gpuguard",
    runtime_class: str | None = "nvidia",
) -> dict[str, Any]:
    """The GPU-reset Job (batch/v1): ``nvidia-smi -r -i <uuid>`` on the one held GPU of
    ``node`` (docs/remediation.md#gpu-reset), once per isolation of that card (its name is
    derived from the isolation time and the uuid: a second create finds it).

    Least privilege, field by field (docs/security.md#the-gpu-reset-job): ``nodeName`` (the
    card is there, the node is cordoned: ``tolerations`` Exists); the NVIDIA runtime
    (``runtimeClassName``) with ``NVIDIA_VISIBLE_DEVICES=<uuid>`` and the ``utility``
    capability gives it that card's device node, ``/dev/nvidiactl`` and nvidia-smi — no other
    GPU, no host path, no compute libraries; root with every capability dropped but
    ``SYS_ADMIN`` (``GPU_RESET_CAPABILITY``), never ``privileged`` (which would open every
    device of the host), no privilege escalation, a read-only root filesystem, RuntimeDefault
    seccomp, no host namespaces, no API token; nvidia-smi itself, not gpuguard's Python, runs
    with that capability. Its result is its exit status (the Job's Complete/Failed); whether
    the GPU is well afterwards is for the return checks and the burn-in. InputError for a
    ``uuid`` the admission policy would refuse."""
    if not remediation_model.CARD_UUID.match(uuid):
        raise InputError(f"GPU reset: {uuid!r} is not a GPU UUID (GPU-<hex and dashes>)")
    container = {
        "name": str(JobKind.GPU_RESET),  # the admission policy: the name says what it runs
        "image": image,
        "command": ["nvidia-smi", "-r", "-i", uuid],
        "env": _env({"NVIDIA_VISIBLE_DEVICES": uuid, "NVIDIA_DRIVER_CAPABILITIES": "utility"}),
        "securityContext": {
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsUser": 0,
            "capabilities": {"drop": ["ALL"], "add": [GPU_RESET_CAPABILITY]},
        },
        "resources": {
            "requests": {"cpu": "50m", "memory": "32Mi"},
            "limits": {"cpu": "200m", "memory": "128Mi"},
        },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    key = f"{isolated_at}/{uuid}"
    job = _job(JobKind.GPU_RESET, node, key, namespace, container, [], runtime_class)
    job["metadata"]["annotations"] = {annotation_keys.ISOLATED_AT: isolated_at,
                                      annotation_keys.GPU_UUID: uuid}
    job["spec"]["activeDeadlineSeconds"] = GPU_RESET_DEADLINE_S
    return job


def _job(
    kind: JobKind,
    node: str,
    isolated_at: str,
    namespace: str,
    container: dict[str, Any],
    volumes: list[dict[str, Any]],
    runtime_class: str | None,
) -> dict[str, Any]:
    labels = _labels(kind, node)
    job: dict[str, Any] = {
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
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "nodeName": node,
                    "restartPolicy": "Never",
                    "serviceAccountName": EVIDENCE_SERVICE_ACCOUNT,
                    "automountServiceAccountToken": False,
                    "hostPID": False,
                    "hostNetwork": False,
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }
    if runtime_class:
        job["spec"]["template"]["spec"]["runtimeClassName"] = runtime_class
    return job


class Jobs:
    """Creates gpuguard's Jobs and reads their pods' termination messages."""

    def __init__(self, client: Client, namespace: str = "gpuguard") -> None:
        self._client = client
        self._namespace = namespace

    def create(self, manifest: dict[str, Any]) -> str | None:
        """Create the Job; its uid (for the node mark that ``result`` checks), or None when it
        already exists (an earlier tick made it, or someone else did)."""
        job = cast(Job, Job.from_dict(manifest))
        try:
            with api_errors.translated(f"creating Job {manifest['metadata']['name']}"):
                made = self._client.create(job, namespace=self._namespace)
        except ConflictError:
            return None
        if not (uid := made.metadata.uid if made.metadata else None):
            raise SourceError(f"creating Job {manifest['metadata']['name']}: the API named no uid")
        return uid

    def result(self, name: str, created_uid: str | None = None) -> job_model.JobResult:
        """The Job's own state (its ``Complete``/``Failed`` condition) and, from the pods it
        owns, the termination message. ABSENT when the Job does not exist (never created, or
        deleted by its TTL). ``created_uid``: the uid gpuguard recorded when it created the
        Job ("" when it recorded none): a Job of another uid is not gpuguard's (``not_created``);
        None: not checked."""
        with api_errors.translated(f"reading Job {name}", SourceError):
            try:
                job = self._client.get(Job, name, namespace=self._namespace)
            except ApiError as e:
                if e.status is not None and e.status.code == 404:
                    return job_model.JobResult(job_model.JobState.ABSENT)
                raise
        uid = job.metadata.uid if job.metadata else None
        if created_uid is not None and (foreign := not_created(name, uid, created_uid)):
            return job_model.JobResult(job_model.JobState.FAILED, detail=foreign)
        with api_errors.translated(f"reading the pods of Job {name}", SourceError):
            pods = list(
                self._client.list(Pod, namespace=self._namespace, labels={"job-name": name})
            )
        owned = [pod for pod in pods if uid and _owned_by(pod, uid)]
        if (foreign := not_ours(name, job, owned)) is not None:
            return job_model.JobResult(job_model.JobState.FAILED, detail=foreign)
        return job_result(job, owned)


def not_created(name: str, uid: str | None, created_uid: str) -> str | None:
    """Why the Job named ``name`` is not the one gpuguard created (its uid is not the one
    recorded on the node at creation), else None. A Job of exactly gpuguard's name and shape
    made by someone else first (the admission policies uninstalled) has another uid, or none
    was recorded: gpuguard's create found it already there (docs/security.md)."""
    if created_uid and uid == created_uid:
        return None
    recorded = f"gpuguard created uid {created_uid}" if created_uid else "gpuguard created none"
    return (f"not gpuguard's Job: {name} has uid {uid or 'none'}, {recorded}; "
            f"its result is not read")


def not_ours(name: str, job: Job, pods: list[Pod]) -> str | None:
    """Why a Job of gpuguard's name is not the one gpuguard made for that node, else None.
    gpuguard names a Job after its node (``job_name``) and pins it there (``nodeName`` = the
    ``gpuguard.io/node`` label): one pinned elsewhere, or whose pods ran elsewhere, was made
    by someone else (a Job of the predictable name created in advance) and reads as a
    failure naming where it ran, never as a pass."""
    labels = (job.metadata.labels if job.metadata else None) or {}
    node = labels.get(NODE_LABEL, "")
    template = job.spec.template.spec if job.spec and job.spec.template else None
    pinned = template.nodeName if template else None
    ran = sorted({p.spec.nodeName for p in pods if p.spec and p.spec.nodeName} - {node})
    if node and pinned == node and not ran and _named_for(name, node):
        return None
    where = ", ".join(ran) or pinned or "no node"
    return (f"not gpuguard's Job: {name} is pinned to {where}, not to the node its name and "
            f"its {NODE_LABEL} label ({node or 'none'}) say; its result is not read")


def _named_for(name: str, node: str) -> bool:
    return any(name[:-9] == job_name(kind, node, "")[:-9] for kind in JobKind)


def _owned_by(pod: Pod, uid: str) -> bool:
    """Only a pod the Job controller made for this Job speaks for it: any pod can carry the
    ``job-name`` label, only the owner's uid proves it (Kubernetes "Owners and Dependents")."""
    refs = (pod.metadata.ownerReferences if pod.metadata else None) or []
    return any(ref.kind == "Job" and ref.uid == uid and ref.controller for ref in refs)


def job_result(job: Job, pods: list[Pod]) -> job_model.JobResult:
    """The Job controller's decision decides its state (``Complete``/``SuccessCriteriaMet``, or
    ``Failed``/``FailureTarget`` with a reason such as ``DeadlineExceeded`` or
    ``BackoffLimitExceeded``); its pods give only the termination message, and may be gone
    (PodGC, deadline) or stuck terminating."""
    status = job.status
    started = status.startTime if status else None
    terminal = _terminal_condition(job)
    if terminal is None:
        return job_model.JobResult(job_model.JobState.RUNNING, started_at=started)
    kind, reason, text = terminal
    message = _termination_message(pods, "Succeeded" if kind == "Complete" else "Failed")
    if kind == "Complete":
        return job_model.JobResult(job_model.JobState.SUCCEEDED, message, started_at=started)
    if not pods:
        text = f"{text}; its pods are gone" if text else "its pods are gone"
    detail = f"{reason}: {text}" if reason and text else reason or text
    return job_model.JobResult(
        job_model.JobState.FAILED, message, detail=detail, started_at=started
    )


# Since Kubernetes 1.31 the Job controller adds ``Failed``/``Complete`` only once every pod of
# the Job has terminated, and marks its decision at once with ``FailureTarget`` (deadline,
# backoff limit) or ``SuccessCriteriaMet``: "use the FailureTarget or the SuccessCriteriaMet
# condition to evaluate whether the Job has failed or succeeded without having to wait for the
# controller to add a terminal condition" (kubernetes.io/docs/concepts/workloads/controllers/
# job, "Termination of Job pods"). A pod stuck in a dead GPU's driver never terminates, so the
# decision is all gpuguard will ever see (seen on the real control plane: tests/realcluster).
_DECIDED = {"Complete": "Complete", "SuccessCriteriaMet": "Complete", "Failed": "Failed",
            "FailureTarget": "Failed"}


def _terminal_condition(job: Job) -> tuple[str, str, str] | None:
    for condition in (job.status.conditions if job.status else None) or []:
        if condition.type in _DECIDED and condition.status == "True":
            return _DECIDED[condition.type], condition.reason or "", condition.message or ""
    return None


def _termination_message(pods: list[Pod], phase: str) -> str | None:
    """The message of the newest pod that ended in ``phase`` (a retried Job has several)."""
    ended = [pod for pod in pods if pod.status and pod.status.phase == phase]
    ended.sort(key=_created)
    for pod in reversed(ended):
        statuses = (pod.status.containerStatuses or []) if pod.status else []
        state = statuses[0].state if statuses else None
        if state is not None and state.terminated is not None:
            return state.terminated.message
    return None


def _created(pod: Pod) -> datetime:
    created = pod.metadata.creationTimestamp if pod.metadata else None
    return created or datetime(1970, 1, 1, tzinfo=UTC)
