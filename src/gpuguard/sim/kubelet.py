"""The simulated kubelet for gpuguard's Jobs: it runs them on their pinned node.

A Job gpuguard creates (label ``app.kubernetes.io/part-of=gpuguard``) gets a Pod bound to its
``nodeName``; once the node is up and the Job's run time has passed, the container's command
is executed by ``run`` — the caller's way to run the real program against that node's host
tree, as a container would — and the Pod ends Succeeded or Failed with the command's output as
its termination message (cut at 4096 bytes, as the kubelet does). The Job's status follows.
A node that is down keeps the Pod Pending; a Job pinned to a node that does not exist fails.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gpuguard.sim import kube_objects, state, store, world

RunCommand = Callable[[state.SimNode, list[str]], tuple[int, str]]
MESSAGE_LIMIT = 4096


@dataclass
class JobKubelet:
    world: world.World
    run: RunCommand
    runtime: timedelta = timedelta(seconds=30)
    _started: dict[str, datetime] = field(default_factory=dict)
    _done: set[str] = field(default_factory=set)

    def step(self) -> None:
        """Start new gpuguard Jobs' pods and finish the ones whose time has come."""
        for job in self.world.store.list("Job"):
            labels = job["metadata"].get("labels") or {}
            name = job["metadata"]["name"]
            if labels.get("app.kubernetes.io/part-of") == "gpuguard" and name not in self._done:
                self._advance(job)

    def _advance(self, job: store.Obj) -> None:
        name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
        spec = job["spec"]["template"]["spec"]
        node_name = spec.get("nodeName", "")
        try:
            node = self.world.node(node_name)
        except KeyError:
            self._finish(job, 1, f"node {node_name!r} not found")
            return
        if node.down_until is not None:
            return
        now = self.world.now
        if name not in self._started:
            self._started[name] = now
            self.world.store.create("Pod", namespace, _pod(job, node_name, now))
            return
        if now - self._started[name] >= self.runtime:
            code, message = self.run(node, list(spec["containers"][0].get("command", [])))
            self._finish(job, code, message)

    def _finish(self, job: store.Obj, code: int, message: str) -> None:
        name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
        now = self.world.now
        started = self._started.get(name, now)
        phase = "Succeeded" if code == 0 else "Failed"
        terminated = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "message": message.encode()[:MESSAGE_LIMIT].decode(errors="ignore"),
            "startedAt": kube_objects.timestamp(started),
            "finishedAt": kube_objects.timestamp(now),
        }
        pod_status = {
            "phase": phase,
            "containerStatuses": [
                {"name": "main", "ready": False, "restartCount": 0, "image": "gpuguard",
                 "imageID": "", "state": {"terminated": terminated}}
            ],
        }
        try:
            self.world.store.merge_patch("Pod", namespace, name, {"status": pod_status})
        except store.StoreNotFound:
            self.world.store.create("Pod", namespace, _pod(job, "", now) | {"status": pod_status})
        key = "succeeded" if code == 0 else "failed"
        self.world.store.merge_patch("Job", namespace, name, {"status": {key: 1}})
        self._done.add(name)


def _pod(job: store.Obj, node: str, now: datetime) -> dict[str, Any]:
    name = job["metadata"]["name"]
    template = job["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": job["metadata"]["namespace"],
            "labels": (template.get("metadata", {}).get("labels") or {}) | {"job-name": name},
            "creationTimestamp": kube_objects.timestamp(now),
        },
        "spec": template["spec"] | {"nodeName": node or template["spec"].get("nodeName")},
        "status": {"phase": "Running", "startTime": kube_objects.timestamp(now)},
    }
