"""The simulated world as the real control plane's nodes: what kubelets and the hardware do,
and nothing of what the control plane does.

The world keeps its own object store (``sim.store``: what ``sim.mirror`` renders from the
nodes, and what kube-state-metrics reads); each ``sync`` carries it to the real API server
the way each party would:

- **the kubelets**: register each Node (capacity, labels), post its status (a strategic merge
  patch of ``nodes/NAME/status``, so conditions others own — gpuguard's agent's — stay) and
  renew its Lease in ``kube-node-lease`` while the node is up (a rebooting node's kubelet is
  silent, and the real node lifecycle controller marks it NotReady and taints it);
- **people**: the ConfigMaps they apply (a declared change, the admin's change Job templates);
- **the workloads**: the world's Pods (workloads, operator pods) are created once, bound to
  their node, and their status posted; what the real controllers delete stays deleted;
- **gpuguard's Jobs**: the real Job controller makes the pods; a node's kubelet runs each pod
  bound to it (Running, then after ``runtime`` the container's command through ``run`` against
  that node's host tree, then Succeeded/Failed with the termination message, cut at 4096
  bytes). A ``job_hang`` pod never ends, and at its deadline stays Terminating until its node
  restarts (a process stuck in a dead GPU's driver ignores SIGKILL); any other deleted pod is
  ended at once (the kubelet confirms with a zero grace period);
- **people and gpuguard**: what they write on a Node (``spec.unschedulable``, taints, labels,
  annotations) is read back into the world's store, so the world (a device plugin that follows
  a label, a workload that cannot land on a cordoned node) and kube-state-metrics see it.

What a kubelet does goes as that node's kubelet (``system:node:NAME``, impersonated: the Node
authorizer and NodeRestriction judge it as they judge a real one); what people, the workloads'
controllers and the node provisioner do goes as the admin. gpuguard itself runs with its own
ServiceAccount's token.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from gpuguard.sim import kubelet, state, store, world
from gpuguard.sim.control_plane import chart, cluster

log = logging.getLogger(__name__)
Obj = dict[str, Any]
RunCommand = Callable[[state.SimNode, list[str]], tuple[int, str]]
LEASE_RENEW_S = 5.0
LEASE_DURATION_S = 40
PART_OF = "app.kubernetes.io/part-of=gpuguard"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
_NODE_FIELDS_FROM_API = ("unschedulable", "taints")


@dataclass
class Bridge:
    """Carries one world to one real control plane; call ``sync`` after each world step."""

    played: world.World
    plane: cluster.ControlPlane
    run: RunCommand
    runtime: timedelta = timedelta(seconds=2)  # wall time a gpuguard Job's pod runs
    _pushed: dict[tuple[str, str, str], Obj] = field(default_factory=dict)
    _created: set[tuple[str, str, str]] = field(default_factory=set)
    _namespaces: set[str] = field(default_factory=set)
    _renewed: float = 0.0
    _started: dict[str, float] = field(default_factory=dict)  # pod uid -> wall start
    _hung: dict[str, str] = field(default_factory=dict)  # pod uid -> boot id it hangs in
    # each Node's labels and annotations as last read from the API server: what the world
    # holds beyond them, the world's own parties wrote (the applying tool, gpu-feature-discovery)
    _pulled: dict[str, Obj] = field(default_factory=dict)
    _down: set[str] = field(default_factory=set)  # nodes down at the last sync

    def sync(self) -> None:
        """One pass: nodes, leases, pods out; people's and gpuguard's node marks in; the
        kubelets' work on gpuguard's Job pods."""
        down = {n.name for n in self.played.nodes if n.down_until is not None}
        if self._down - down or time.monotonic() - self._renewed >= LEASE_RENEW_S:
            self._renew_leases()  # a kubelet that starts renews its Lease at once
        self._down = down
        for node in self.played.store.list("Node"):
            self._push_node(node)
        for pod in self.played.store.list("Pod"):
            self._push_pod(pod)
        for configmap in self.played.store.list("ConfigMap"):
            self._push_configmap(configmap)
        self.pull_node_marks()
        self._run_job_pods()

    # ---- out: what the kubelets post ----------------------------------------------------

    def _push_node(self, node: Obj) -> None:
        name = node["metadata"]["name"]
        key = ("Node", "", name)
        if key not in self._created:
            self._register(name, node["metadata"].get("labels") or {})
            self._created.add(key)
        self._push_world_marks(name, node["metadata"])
        status = node.get("status") or {}
        if self._pushed.get(key) != status:
            self._request("PATCH", f"/api/v1/nodes/{name}/status", {"status": status},
                          content_type=STRATEGIC, node=name)  # fmt: skip
            self._pushed[key] = copy.deepcopy(status)

    def _register(self, name: str, labels: dict[str, str]) -> None:
        """The kubelet registers its Node with the labels NodeRestriction lets it set; the
        cluster's provisioner adds the rest (a node role, say) as an admin."""
        own = {k: v for k, v in labels.items() if _kubelet_may_set(k)}
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": own}}
        self._request("POST", "/api/v1/nodes", body, ok=(201, 409), node=name)
        if own != labels:
            others = {k: v for k, v in labels.items() if k not in own}
            self._request("PATCH", f"/api/v1/nodes/{name}", {"metadata": {"labels": others}},
                          content_type=MERGE)  # fmt: skip

    def _push_world_marks(self, name: str, meta: Obj) -> None:
        """The labels and annotations the world's parties wrote since the last read."""
        pulled = self._pulled.get(name)
        if pulled is None:
            return  # not read yet: the first pull takes the API server's
        patch: Obj = {}
        for part in ("labels", "annotations"):
            theirs = pulled.get(part) or {}
            written = {k: v for k, v in (meta.get(part) or {}).items() if theirs.get(k) != v}
            if written:
                patch[part] = written
        if patch:
            self._request("PATCH", f"/api/v1/nodes/{name}", {"metadata": patch},
                          content_type=MERGE)  # fmt: skip

    def _renew_leases(self) -> None:
        self._renewed = time.monotonic()
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        for node in self.played.nodes:
            if node.down_until is not None:
                continue  # a rebooting node's kubelet renews nothing
            spec = {
                "holderIdentity": node.name,
                "leaseDurationSeconds": LEASE_DURATION_S,
                "renewTime": now,
            }
            path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node.name}"
            if (
                self._request("PATCH", path, {"spec": spec}, content_type=MERGE,
                              ok=(200, 404), node=node.name)
                == 404
            ):
                self._request(
                    "POST",
                    path.rsplit("/", 1)[0],
                    {"metadata": {"name": node.name, "namespace": "kube-node-lease"}, "spec": spec},
                    ok=(201, 409),
                    node=node.name,
                )

    def _push_pod(self, pod: Obj) -> None:
        meta = pod["metadata"]
        namespace, name = meta.get("namespace", "default"), meta["name"]
        if (meta.get("labels") or {}).get("app.kubernetes.io/part-of") == "gpuguard":
            return  # gpuguard's Job pods are the real Job controller's
        key = ("Pod", namespace, name)
        if key not in self._created:
            self._namespace(namespace)
            body = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    k: v
                    for k, v in meta.items()
                    if k in ("name", "namespace", "labels", "annotations")
                },
                "spec": pod["spec"],
            }
            self._request(
                "POST", f"/api/v1/namespaces/{namespace}/pods", body, ok=(201, 409, 403, 422)
            )
            self._created.add(key)
        status = pod.get("status") or {}
        if self._pushed.get(key) != status:
            self._status({"metadata": {"namespace": namespace, "name": name},
                          "spec": pod["spec"]}, status)  # fmt: skip
            self._pushed[key] = copy.deepcopy(status)

    def _push_configmap(self, configmap: Obj) -> None:
        """A person's ``kubectl apply`` of a ConfigMap (a declared change, the admin's change
        Job templates): created, then its data merged when the world's changes; what others
        write on it (gpuguard's rollout progress) stays."""
        meta = configmap["metadata"]
        namespace, name = meta.get("namespace", "default"), meta["name"]
        key = ("ConfigMap", namespace, name)
        data = configmap.get("data") or {}
        if self._pushed.get(key) == data:
            return
        path = f"/api/v1/namespaces/{namespace}/configmaps"
        if key not in self._created:
            self._namespace(namespace)
            body = {"metadata": {k: v for k, v in meta.items() if k in ("name", "namespace",
                                                                       "labels", "annotations")},
                    "data": data}  # fmt: skip
            created = self._request("POST", path, body, ok=(201, 409))
            self._created.add(key)
            if created == 201:
                self._pushed[key] = copy.deepcopy(data)
                return
        self._request("PATCH", f"{path}/{name}", {"data": data}, content_type=MERGE)
        self._pushed[key] = copy.deepcopy(data)

    def _namespace(self, name: str) -> None:
        if name not in self._namespaces:
            self._request("POST", "/api/v1/namespaces", {"metadata": {"name": name}}, ok=(201, 409))
            self._namespaces.add(name)

    def someone_leads(self) -> bool:
        """Whether gpuguard's leader Lease is stored (a ``gpuguard run`` connected)."""
        _, listed = self.plane.request(
            "GET", f"/apis/coordination.k8s.io/v1/namespaces/{chart.NAMESPACE}/leases"
        )
        return bool(listed.get("items")) if isinstance(listed, dict) else False

    # ---- in: what people and gpuguard write on Nodes -------------------------------------

    def pull_node_marks(self) -> None:
        """What people and gpuguard wrote on the Nodes, into the world's store."""
        _, listed = self.plane.request("GET", "/api/v1/nodes")
        for real in listed.get("items", []) if isinstance(listed, dict) else []:
            name = real["metadata"]["name"]
            try:
                local = self.played.store.get("Node", "", name)
            except store.StoreNotFound:
                continue
            self._pulled[name] = {part: dict(real["metadata"].get(part) or {})
                                  for part in ("labels", "annotations")}  # fmt: skip
            patch = _marks_patch(local, real)
            if patch:
                self.played.store.merge_patch("Node", "", name, patch)

    # ---- the kubelets' work on gpuguard's Job pods ---------------------------------------

    def _run_job_pods(self) -> None:
        _, listed = self.plane.request("GET", f"/api/v1/pods?labelSelector={PART_OF}")
        for pod in listed.get("items", []) if isinstance(listed, dict) else []:
            if not _of_a_job(pod):
                continue  # the agent's and the controller's pods: the tests play those
            try:
                node = self.played.node(pod["spec"].get("nodeName", ""))
            except KeyError:
                continue
            if pod["metadata"].get("deletionTimestamp"):
                self._end_termination(pod, node)
            elif (
                pod.get("status", {}).get("phase") in ("Pending", "Running")
                and node.down_until is None
            ):
                self._kubelet(pod, node)

    def _kubelet(self, pod: Obj, node: state.SimNode) -> None:
        uid = pod["metadata"]["uid"]
        if uid not in self._started:
            self._started[uid] = time.monotonic()
            kind = (pod["metadata"].get("labels") or {}).get(kubelet.KIND_LABEL, "")
            if self.played.take_job_hang(node.name, kind):
                self._hung[uid] = node.boot_id
            self._status(pod, {"phase": "Running", "startTime": _stamp()})
            return
        if (
            uid in self._hung
            or time.monotonic() - self._started[uid] < self.runtime.total_seconds()
        ):
            return
        container = pod["spec"]["containers"][0]
        code, message = self.run(node, list(container.get("command", [])))
        terminated = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "message": message.encode()[: kubelet.MESSAGE_LIMIT].decode(errors="ignore"),
            "startedAt": pod["status"].get("startTime") or _stamp(),
            "finishedAt": _stamp(),
        }
        self._status(
            pod,
            {
                "phase": "Succeeded" if code == 0 else "Failed",
                "containerStatuses": [
                    {
                        "name": container["name"],
                        "ready": False,
                        "restartCount": 0,
                        "image": container.get("image", ""),
                        "imageID": "",
                        "state": {"terminated": terminated},
                    }
                ],
            },
        )

    def _end_termination(self, pod: Obj, node: state.SimNode) -> None:
        uid = pod["metadata"]["uid"]
        if node.down_until is not None or self._hung.get(uid) == node.boot_id:
            return  # nothing on the node can end it yet
        meta = pod["metadata"]
        self._request(
            "DELETE",
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}?gracePeriodSeconds=0",
            None,
            ok=(200, 404),
            node=node.name,
        )

    def _status(self, pod: Obj, status: Obj) -> None:
        """The pod's status as its node's kubelet posts it (an unbound pod's: the admin's)."""
        meta = pod["metadata"]
        self._request(
            "PATCH",
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
            {"status": status},
            content_type=STRATEGIC,
            ok=(200, 404),
            node=pod.get("spec", {}).get("nodeName") or None,
        )

    def _request(
        self,
        method: str,
        path: str,
        body: Any,
        *,
        content_type: str = "application/json",
        ok: tuple[int, ...] = (200, 201),
        node: str | None = None,
    ) -> int:
        """As ``node``'s kubelet (its user and group: the Node authorizer and NodeRestriction
        judge it), else as the admin (people, the workloads' controllers, the provisioner)."""
        kubelet_user = (f"system:node:{node}", "system:nodes", "system:authenticated")
        status, answer = self.plane.request(
            method, path, body, content_type=content_type, as_user=kubelet_user if node else ()
        )
        if status not in ok:
            message = answer.get("message") if isinstance(answer, dict) else answer
            log.warning("simulated kubelet: %s %s: %s %s", method, path, status, message)
        return status


def _marks_patch(local: Obj, real: Obj) -> Obj:
    """The merge patch that gives the world's Node the real one's spec marks, labels and
    annotations (a key the real Node lacks is removed)."""
    patch: Obj = {}
    spec = {
        f: real.get("spec", {}).get(f)
        for f in _NODE_FIELDS_FROM_API
        if real.get("spec", {}).get(f) != local.get("spec", {}).get(f)
    }
    if spec:
        patch["spec"] = spec
    for part in ("labels", "annotations"):
        ours, theirs = local["metadata"].get(part) or {}, real["metadata"].get(part) or {}
        changed = {k: v for k, v in theirs.items() if ours.get(k) != v}
        changed |= {k: None for k in ours if k not in theirs}
        if changed:
            patch.setdefault("metadata", {})[part] = changed
    return patch


_KUBELET_LABELS = {
    "kubernetes.io/hostname", "kubernetes.io/arch", "kubernetes.io/os",
    "beta.kubernetes.io/arch", "beta.kubernetes.io/os", "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type", "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
}  # fmt: skip


def _kubelet_may_set(label: str) -> bool:
    """NodeRestriction: a kubelet sets no label in the kubernetes.io / k8s.io namespaces but
    its well-known ones and those under kubelet.kubernetes.io / node.kubernetes.io
    (kubernetes plugin/pkg/admission/noderestriction, KEP-279)."""
    prefix = label.split("/", 1)[0] if "/" in label else ""
    restricted = any(prefix == d or prefix.endswith("." + d) for d in ("kubernetes.io", "k8s.io"))
    if not restricted or label in _KUBELET_LABELS:
        return True
    return any(prefix == d or prefix.endswith("." + d)
               for d in ("kubelet.kubernetes.io", "node.kubernetes.io"))  # fmt: skip


def _of_a_job(pod: Obj) -> bool:
    return any(o.get("kind") == "Job" for o in pod["metadata"].get("ownerReferences") or [])


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
