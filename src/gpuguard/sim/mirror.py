"""The store's view of the world: pushes each SimNode into its Node and system Pod objects.

The world changes ``state.SimNode``; the mirror renders it (``sim.kube_objects``) and patches
only what the kubelet and the pods' own containers would report — Node ``status`` and the
system pods' ``status`` — so ``spec.unschedulable``, labels and annotations stay with the
humans and gpuguard that write them. A patch that would change nothing is not sent, so the
store's resourceVersion moves only when something did.

The patch is a strategic merge patch, as the kubelet's: each of its ``nodestatus`` setters
updates or appends only its own condition type (Ready, MemoryPressure, DiskPressure,
PIDPressure) and the kubelet sends the difference as a strategic merge patch of the status
(kubernetes ``pkg/kubelet/nodestatus/setters.go``, ``pkg/util/node`` ``PatchNodeStatus``), so a
condition another writer set on the Node — node-problem-detector's, or gpuguard's agent's
``GpuFallenOffBus`` — survives every kubelet update and a reboot.
"""

from __future__ import annotations

from datetime import datetime

from gpuguard.sim import kube_objects, state, store


class StoreMirror:
    """Keeps one fleet's Kubernetes objects in step with its SimNodes."""

    def __init__(self, objects: store.ObjectStore, created: datetime) -> None:
        self._store = objects
        self._created = created
        self._synced: dict[tuple[str, str, str], kube_objects.Obj] = {}
        self._ready_since: dict[str, datetime] = {}
        self._restarts: dict[tuple[str, str], int] = {}
        self._absent: set[str] = set()  # nodes whose device-plugin pod its DaemonSet deleted

    def create(self, node: state.SimNode, index: int) -> None:
        """Create the Node and its system pods (once, when the fleet appears)."""
        self._store.create("Node", "", kube_objects.node_object(node, self._created, index))
        for pod in kube_objects.SYSTEM_PODS:
            self._store.create("Pod", pod.namespace,
                               kube_objects.system_pod_object(pod, node.name, self._created))
        self._ready_since[node.name] = self._created

    def readiness_changed(self, node: str, at: datetime) -> None:
        self._ready_since[node] = at

    def restarted(self, node: str, component: str) -> None:
        """A system pod's container restarted (its restartCount goes up by one)."""
        key = (node, component)
        self._restarts[key] = self._restarts.get(key, 0) + 1

    def device_plugin_runs(self, node: str, runs: bool, now: datetime) -> None:
        """The node's device-plugin pod deleted (its DaemonSet no longer selects the node) or
        created again, a new pod with no restarts."""
        pod = next(p for p in kube_objects.SYSTEM_PODS if p.component == "device-plugin")
        name = kube_objects.pod_name(pod, node)
        if runs and node in self._absent:
            self._absent.discard(node)
            self._restarts[(node, pod.component)] = 0
            self._synced.pop(("Pod", pod.namespace, name), None)
            self._store.create("Pod", pod.namespace, kube_objects.system_pod_object(pod, node, now))
        elif not runs and node not in self._absent:
            self._absent.add(node)
            self._store.delete("Pod", pod.namespace, name)

    def sync(self, node: state.SimNode, now: datetime) -> None:
        """Push the node's status and its system pods' readiness (no-op if unchanged)."""
        since = self._ready_since.get(node.name, self._created)
        self._patch_status("Node", "", node.name, kube_objects.node_status(node, now, since))
        for pod in kube_objects.SYSTEM_PODS:
            if pod.component == "device-plugin" and node.name in self._absent:
                continue
            status = kube_objects.system_pod_status(pod, self._pod_ready(node, pod),
                                                    self._pod_restarts(node, pod),
                                                    node.exporter_started or self._created)
            self._patch_status("Pod", pod.namespace, kube_objects.pod_name(pod, node.name),
                               status)

    @staticmethod
    def _pod_ready(node: state.SimNode, pod: kube_objects.SystemPod) -> bool:
        return node.ready and (pod.component != "kube-proxy" or node.kube_proxy_ready)

    def _pod_restarts(self, node: state.SimNode, pod: kube_objects.SystemPod) -> int:
        restarts = self._restarts.get((node.name, pod.component), 0)
        if pod.component == "gpu-feature-discovery":
            restarts += node.gfd_restarts
        return restarts

    def _patch_status(self, kind: str, namespace: str, name: str,
                      status: kube_objects.Obj) -> None:
        key = (kind, namespace, name)
        if self._synced.get(key) != status:
            self._store.merge_patch(kind, namespace, name, {"status": status}, strategic=True)
            self._synced[key] = status
