"""The simulated Job controller, kubelet, TTL controller and PodGC for gpuguard's Jobs.

What Kubernetes does with a Job (kubernetes.io/docs/concepts/workloads/controllers/job and
kubernetes/kubernetes ``pkg/controller/job``, ``pkg/controller/ttlafterfinished``,
``pkg/controller/podgc``), for the Jobs gpuguard creates (label
``app.kubernetes.io/part-of=gpuguard``):

- the Job controller sets ``status.startTime`` and creates a Pod named ``<job>-<suffix>``
  (``generateName``) with the labels ``job-name``/``controller-uid`` (and their
  ``batch.kubernetes.io/`` spellings) and an ``ownerReference`` to the Job's uid;
- ``activeDeadlineSeconds`` past ``startTime``: every active Pod is deleted and the Job gets
  ``FailureTarget`` with reason ``DeadlineExceeded`` ("Job was active longer than specified
  deadline") at once, and ``Failed`` (same reason) only when none of its pods is still
  terminating — since 1.31 the terminal condition waits for the pods ("Termination of Job
  pods" in the Job docs; seen on the real control plane, tests/realcluster). A pod on a node
  that is down, or hung (``job_hang``: a process stuck in a dead GPU's driver, which no signal
  ends), stays Terminating (``deletionTimestamp`` set) until its node restarts, and the Job
  stays at ``FailureTarget`` until then: no TTL runs for it;
- a failed Pod is replaced until ``status.failed`` exceeds ``backoffLimit`` (default 6); then
  ``Failed``/``BackoffLimitExceeded`` ("Job has reached the specified backoff limit");
- a succeeded Pod: ``Complete`` (reason ``CompletionsReached``) and ``completionTime``;
- ``ttlSecondsAfterFinished`` after the terminal condition, the TTL controller deletes the Job
  and (cascading) its Pods;
- PodGC deletes terminated Pods beyond ``--terminated-pod-gc-threshold`` (12500, oldest first)
  and Pods whose owner is gone; a Pod bound to a Node that does not exist is set Failed by
  PodGC (reason ``DeletionByPodGC``).

The kubelet runs a Pod on its ``nodeName`` once the node is up: after ``runtime`` the
container's command is executed by ``run`` (the caller's way to run the real program against
that node's host tree) and the Pod ends Succeeded or Failed with the command's output as its
termination message (cut at 4096 bytes, as the kubelet does). A node that is down keeps the
Pod Pending. A scenario's ``job_hang`` makes the next Pod of that kind on that node never end.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from gpuguard.sim import kube_objects, state, store, world

RunCommand = Callable[[state.SimNode, list[str]], tuple[int, str]]
MESSAGE_LIMIT = 4096
DEFAULT_BACKOFF_LIMIT = 6  # batch/v1 JobSpec.backoffLimit default
TERMINATED_POD_GC_THRESHOLD = 12500  # kube-controller-manager --terminated-pod-gc-threshold
PART_OF = ("app.kubernetes.io/part-of", "gpuguard")
KIND_LABEL = "gpuguard.io/job"  # which of gpuguard's Jobs (evidence, burnin): job_hang's kind
ACTIVE = ("Pending", "Running")
DEADLINE_MESSAGE = "Job was active longer than specified deadline"
BACKOFF_MESSAGE = "Job has reached the specified backoff limit"


@dataclass
class JobKubelet:
    world: world.World
    run: RunCommand
    runtime: timedelta = timedelta(seconds=30)
    pod_gc_threshold: int = TERMINATED_POD_GC_THRESHOLD
    # pods that never end (job_hang), with the boot they hang in: a restart ends them
    _hung: dict[str, str] = field(default_factory=dict)
    _due: list[datetime] = field(default_factory=list)

    def step(self) -> None:
        """One pass of the controllers: Jobs, their Pods, TTL and PodGC."""
        self._due = []
        for job in self._stored("Job"):
            labels = job["metadata"].get("labels") or {}
            if labels.get(PART_OF[0]) == PART_OF[1] and _terminal(job) is None:
                self._sync(job)
        self._expire_finished()
        self._collect_pods()

    def _stored(self, kind: str, namespace: str | None = None) -> tuple[store.Obj, ...]:
        """The stored objects, not copies (``ObjectStore.snapshot``): these controllers only
        read them, and each change they make is a store write. Copying every Job and Pod on
        every pass was most of a long scenario's time (``burnin-hangs``: 45 s of 47)."""
        return self.world.store.snapshot(kind, namespace).objects

    def due(self, now: datetime) -> bool:
        """Whether a pass at ``now`` would change something no event announces: a pod's run
        time, a deadline or a TTL has come (a caller stepping time skips the passes between)."""
        return any(when <= now for when in self._due)

    # ---- the Job controller ------------------------------------------------------------------

    def _sync(self, job: store.Obj) -> None:
        now = self.world.now
        status = dict(job.get("status") or {})
        if "startTime" not in status:
            status["startTime"] = kube_objects.timestamp(now)
        pods = self._owned_pods(job)
        for pod in pods:
            if _terminating(pod):
                self._end_termination(pod)
            elif pod["status"].get("phase") in ACTIVE:
                self._kubelet(job, pod)
        pods = self._owned_pods(job)
        counts = {p: sum(1 for pod in pods if pod["status"].get("phase") == p) for p in
                  ("Succeeded", "Failed")}
        active = [pod for pod in pods
                  if pod["status"].get("phase") in ACTIVE and not _terminating(pod)]
        failed = max(int(status.get("failed", 0)), counts["Failed"])
        status |= {"active": len(active), "failed": failed, "succeeded": counts["Succeeded"]}
        deadline = job["spec"].get("activeDeadlineSeconds")
        started = parse_time(status["startTime"])
        if deadline is not None:
            self._due.append(started + timedelta(seconds=int(deadline)))
        if _failure_target(status) is not None:
            self._finish_failure(status, pods, now)
        elif deadline is not None and now - started >= timedelta(seconds=int(deadline)):
            for pod in active:
                self._terminate_pod(pod, now)
            status |= {"active": 0, "failed": failed + len(active)}
            status["conditions"] = [
                _condition("FailureTarget", "DeadlineExceeded", DEADLINE_MESSAGE, now)
            ]
            self._finish_failure(status, self._owned_pods(job), now)
        elif counts["Succeeded"]:
            status["conditions"] = [_condition("Complete", "CompletionsReached", "", now)]
            status["completionTime"] = kube_objects.timestamp(now)
        elif failed > int(job["spec"].get("backoffLimit", DEFAULT_BACKOFF_LIMIT)):
            status["conditions"] = [
                _condition("Failed", "BackoffLimitExceeded", BACKOFF_MESSAGE, now)
            ]
        elif not active:
            self._create_pod(job, now)
            status["active"] = 1
        self._write_status(job, status)

    def _owned_pods(self, job: store.Obj) -> list[store.Obj]:
        uid = job["metadata"]["uid"]
        return [
            pod for pod in self._stored("Pod", job["metadata"]["namespace"])
            if any(ref.get("uid") == uid for ref in pod["metadata"].get("ownerReferences") or [])
        ]

    def _create_pod(self, job: store.Obj, now: datetime) -> None:
        pod = _pod(job, now)
        node_name = pod["spec"].get("nodeName", "")
        kind = (job["metadata"].get("labels") or {}).get(KIND_LABEL, "")
        created = self.world.store.create("Pod", job["metadata"]["namespace"], pod)
        if self.world.take_job_hang(node_name, kind):
            self._hung[created["metadata"]["name"]] = self.world.node(node_name).boot_id
        self._kubelet(job, created)  # the kubelet starts it at once on a node that is up

    def _finish_failure(self, status: dict[str, Any], pods: list[store.Obj],
                        now: datetime) -> None:
        """``Failed`` beside ``FailureTarget`` once no pod of the Job is still terminating."""
        target = _failure_target(status)
        if target is None or any(_terminating(pod) for pod in pods):
            return
        if not any(c.get("type") == "Failed" for c in status["conditions"]):
            failed = _condition("Failed", target["reason"], target["message"], now)
            status["conditions"] = [*status["conditions"], failed]

    def _write_status(self, job: store.Obj, status: dict[str, Any]) -> None:
        if status != job.get("status"):
            name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
            self.world.store.merge_patch("Job", namespace, name, {"status": status})

    # ---- the kubelet ---------------------------------------------------------------------------

    def _kubelet(self, job: store.Obj, pod: store.Obj) -> None:
        node_name = pod["spec"].get("nodeName", "")
        try:
            node = self.world.node(node_name)
        except KeyError:
            self._end(pod, 1, f"node {node_name!r} not found", reason="DeletionByPodGC")
            return
        if node.down_until is not None:
            return
        now = self.world.now
        started = pod["status"].get("startTime")
        if started is None:
            self._patch_pod(pod, {"phase": "Running", "startTime": kube_objects.timestamp(now)})
            self._due.append(now + self.runtime)
            return
        name = pod["metadata"]["name"]
        if name in self._hung:
            return
        if now - parse_time(started) < self.runtime:
            self._due.append(parse_time(started) + self.runtime)
            return
        container = job["spec"]["template"]["spec"]["containers"][0]
        code, message = self.run(node, list(container.get("command", [])))
        self._end(pod, code, message)

    def _end(self, pod: store.Obj, code: int, message: str, reason: str | None = None) -> None:
        now = self.world.now
        started = pod["status"].get("startTime") or kube_objects.timestamp(now)
        terminated = {
            "exitCode": code,
            "reason": reason or ("Completed" if code == 0 else "Error"),
            "message": message.encode()[:MESSAGE_LIMIT].decode(errors="ignore"),
            "startedAt": started,
            "finishedAt": kube_objects.timestamp(now),
        }
        self._patch_pod(pod, {
            "phase": "Succeeded" if code == 0 else "Failed",
            "containerStatuses": [
                {"name": "main", "ready": False, "restartCount": 0, "image": "gpuguard",
                 "imageID": "", "state": {"terminated": terminated}}
            ],
        })  # fmt: skip

    def _patch_pod(self, pod: store.Obj, status: dict[str, Any]) -> None:
        """A strategic merge patch of the pod's status, as the kubelet's status manager sends
        (kubernetes ``pkg/util/pod`` ``PatchPodStatus``): conditions others set stay."""
        name, namespace = pod["metadata"]["name"], pod["metadata"]["namespace"]
        self.world.store.merge_patch("Pod", namespace, name, {"status": status}, strategic=True)

    def _terminate_pod(self, pod: store.Obj, now: datetime) -> None:
        """Delete the pod as the API server does with a grace period: its kubelet ends it at
        once, unless the node is down or the pod is hung, when it stays Terminating."""
        if self._can_end(pod):
            self._delete_pod(pod)
            return
        name, namespace = pod["metadata"]["name"], pod["metadata"]["namespace"]
        self.world.store.merge_patch("Pod", namespace, name, {"metadata": {
            "deletionTimestamp": kube_objects.timestamp(now), "deletionGracePeriodSeconds": 30}})

    def _end_termination(self, pod: store.Obj) -> None:
        if self._can_end(pod):
            self._delete_pod(pod)

    def _can_end(self, pod: store.Obj) -> bool:
        try:
            node = self.world.node(pod["spec"].get("nodeName", ""))
        except KeyError:
            return True  # PodGC deletes a pod whose node is gone
        boot = self._hung.get(pod["metadata"]["name"])
        return node.down_until is None and boot != node.boot_id

    def _delete_pod(self, pod: store.Obj) -> None:
        with contextlib.suppress(store.StoreNotFound):
            self.world.store.delete("Pod", pod["metadata"]["namespace"], pod["metadata"]["name"])
        self._hung.pop(pod["metadata"]["name"], None)

    # ---- the TTL controller and PodGC --------------------------------------------------------

    def _expire_finished(self) -> None:
        now = self.world.now
        for job in self._stored("Job"):
            ttl, terminal = job["spec"].get("ttlSecondsAfterFinished"), _terminal(job)
            if ttl is None or terminal is None:
                continue
            finished = parse_time(terminal["lastTransitionTime"])
            self._due.append(finished + timedelta(seconds=int(ttl)))
            if now - finished >= timedelta(seconds=int(ttl)):
                for pod in self._owned_pods(job):
                    self._delete_pod(pod)
                meta = job["metadata"]
                self.world.store.delete("Job", meta["namespace"], meta["name"])

    def _collect_pods(self) -> None:
        uids = {job["metadata"]["uid"] for job in self._stored("Job")}
        terminated = []
        for pod in self._stored("Pod"):
            refs = pod["metadata"].get("ownerReferences") or []
            if any(_batch_job(ref) and ref.get("uid") not in uids for ref in refs):
                self._delete_pod(pod)  # the garbage collector: its owner is gone
            elif pod["status"].get("phase") in ("Succeeded", "Failed"):
                terminated.append(pod)
        excess = len(terminated) - self.pod_gc_threshold
        if excess > 0:
            terminated.sort(key=lambda pod: pod["metadata"]["creationTimestamp"])
            for pod in terminated[:excess]:
                self._delete_pod(pod)


def _batch_job(ref: dict[str, Any]) -> bool:
    """An owner reference to a batch/v1 Job (a Volcano ``batch.volcano.sh`` Job is another kind
    that the Job controller's garbage collection does not follow)."""
    return ref.get("kind") == "Job" and ref.get("apiVersion", "batch/v1") == "batch/v1"


def parse_time(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def _failure_target(status: dict[str, Any]) -> dict[str, Any] | None:
    for condition in status.get("conditions") or []:
        if condition.get("type") == "FailureTarget" and condition.get("status") == "True":
            return dict(condition)
    return None


def _terminating(pod: store.Obj) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def _terminal(job: store.Obj) -> dict[str, Any] | None:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            return dict(condition)
    return None


def _condition(kind: str, reason: str, message: str, now: datetime) -> dict[str, Any]:
    stamp = kube_objects.timestamp(now)
    return {"type": kind, "status": "True", "reason": reason, "message": message,
            "lastProbeTime": stamp, "lastTransitionTime": stamp}


def _pod(job: store.Obj, now: datetime) -> dict[str, Any]:
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    template = job["spec"]["template"]
    owner = {"job-name": name, "controller-uid": uid, "batch.kubernetes.io/job-name": name,
             "batch.kubernetes.io/controller-uid": uid}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{name}-",
            "namespace": job["metadata"]["namespace"],
            "labels": (template.get("metadata", {}).get("labels") or {}) | owner,
            "creationTimestamp": kube_objects.timestamp(now),
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                 "uid": uid, "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": dict(template["spec"]),
        "status": {"phase": "Pending"},
    }
