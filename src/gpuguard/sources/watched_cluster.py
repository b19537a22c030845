"""The guard's ClusterReader from watch caches of Nodes and unfinished Pods
(docs/design.md#fast-path): a tick reads memory, not a list of the whole cluster. The pod
cache keeps each pod as both readers of pods need it: the tick's ``fleet.Pod`` and the gang
check's ``WorkloadPod`` (``workload_pods``; its annotations cut to the keys asked for).

A cache is answered from only while it is fresh: synced, and its list or watch not failing
for longer than ``stale_after`` (the tick interval). Otherwise the tick lists afresh (the
safety net, ``KubernetesReader``); when that fails too it raises SourceError and the tick
decides nothing — a stale or missing cache is never decided on (fail closed).

The guard reads its own writes: the node writer reports each written Node's resourceVersion
(``node_written``), and the Nodes are answered from the cache only once its watch has
delivered that write (else from a fresh list). A tick right after another — a wake — so
never judges the fleet without the marks and isolations the last tick wrote, which the
breaker counts (docs/breaker.md).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any, NamedTuple, TypeVar

from lightkube import Client

from gpuguard.clients import kube_lists
from gpuguard.errors import SourceError
from gpuguard.model import fleet, ports, workloads
from gpuguard.sources import gang_pods, kubernetes, watch_cache

log = logging.getLogger(__name__)

T = TypeVar("T")
CATCH_UP = timedelta(seconds=5)  # how long a read waits for the watch to show its own write
NodeHook = Callable[[fleet.Node | None, fleet.Node], None]
U = TypeVar("U")


class CachedPod(NamedTuple):
    """One pod as the tick and the gang check read it (one labels mapping for both)."""

    pod: fleet.Pod
    workload: workloads.WorkloadPod


def pod_reader(annotations: Collection[str]) -> Callable[[Mapping[str, Any]], CachedPod]:
    """The pod cache's converter, keeping of the pod's annotations only ``annotations``."""

    def read(obj: Mapping[str, Any]) -> CachedPod:
        _share_repeated(obj)
        work = gang_pods.workload_pod(obj, annotations=annotations)
        return CachedPod(replace(kubernetes.pod_from_dict(obj), labels=work.labels), work)

    return read


def read_node(obj: Mapping[str, Any]) -> fleet.Node:
    """The node cache's converter: ``node_from_dict``, with the label and annotation keys and
    values that repeat from node to node (``feature.node.kubernetes.io/…``, NFD's
    ``nfd.node.kubernetes.io/feature-labels`` list of them all) and the condition types and
    statuses held once."""
    meta = obj.get("metadata") or {}
    _share_labels(meta)
    _share_strings(meta, "annotations")
    for condition in (obj.get("status") or {}).get("conditions") or ():
        for key in ("type", "status", "reason"):
            if isinstance(value := condition.get(key), str):
                condition[key] = sys.intern(value)
    return kubernetes.node_from_dict(obj)


def _share_labels(meta: Any) -> None:
    _share_strings(meta, "labels")


def _share_strings(meta: Any, field: str) -> None:
    """Intern the keys and string values of the mapping ``meta[field]``."""
    found = meta.get(field)
    if isinstance(found, dict):
        meta[field] = {sys.intern(k): sys.intern(v) if isinstance(v, str) else v
                       for k, v in found.items()}  # fmt: skip


def _share_repeated(obj: Mapping[str, Any]) -> None:
    """Intern, in the freshly decoded JSON, the strings that repeat from pod to pod (the
    namespace, node, phase, scheduler, owner kinds, label keys and values): at 100,000 pods
    one copy of each instead of one per pod saves tens of megabytes."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    for part, key in ((meta, "namespace"), (spec, "nodeName"), (spec, "schedulerName"),
                      (status, "phase")):  # fmt: skip
        if isinstance(value := part.get(key), str):
            part[key] = sys.intern(value)
    _share_labels(meta)
    for ref in meta.get("ownerReferences") or ():
        for key in ("kind", "apiVersion"):
            if isinstance(value := ref.get(key), str):
                ref[key] = sys.intern(value)


class WatchedCluster:
    """Nodes and Pods from their caches while fresh, else from a fresh list."""

    def __init__(
        self,
        nodes: watch_cache.WatchCache[fleet.Node],
        pods: watch_cache.WatchCache[CachedPod],
        fallback: ports.ClusterReader,
        stale_after: timedelta,
        close: Callable[[], None] = lambda: None,
        catch_up: timedelta = CATCH_UP,
        fallback_workloads: Callable[[], tuple[workloads.WorkloadPod, ...]] | None = None,
    ) -> None:
        self.node_cache, self.pod_cache = nodes, pods
        self._fallback, self._close = fallback, close
        self._fallback_workloads = fallback_workloads
        self._stale_after_s = stale_after.total_seconds()
        self._catch_up_s = catch_up.total_seconds()
        self._written = ""  # the newest resourceVersion of a Node the guard wrote
        self.fallback_lists = 0  # ticks that listed afresh because a cache was not fresh

    def node_written(self, resource_version: str) -> None:
        """The guard wrote a Node; its next read must include that write."""
        self._written = resource_version

    def nodes(self) -> tuple[fleet.Node, ...]:
        written = self._written
        if written and not self.node_cache.holds(written, self._catch_up_s):
            log.warning("Nodes cache has not seen the guard's write at resourceVersion %s "
                        "within %.0fs: listing afresh for this tick", written, self._catch_up_s)
            self.fallback_lists += 1
            return self._fallback.nodes()
        return self._read(self.node_cache, lambda node: node, self._fallback.nodes)

    def pods(self) -> tuple[fleet.Pod, ...]:
        return self._read(self.pod_cache, lambda cached: cached.pod, self._fallback.pods)

    def workload_pods(self) -> tuple[workloads.WorkloadPod, ...]:
        """The unfinished pods as the gang check reads them (``fleet_health.PodSource``)."""
        listed = self._fallback_workloads
        if listed is None:
            raise SourceError("no list of workload pods to fall back on")
        return self._read(self.pod_cache, lambda cached: cached.workload, listed)

    def start(self) -> None:
        self.node_cache.start()
        self.pod_cache.start()

    def stop(self) -> None:
        """Stop both threads and close their connections."""
        self.node_cache.stop()
        self.pod_cache.stop()
        self._close()

    def wait_synced(self, timeout_s: float) -> bool:
        """Whether both caches synced within ``timeout_s`` (together)."""
        deadline = time.monotonic() + timeout_s
        nodes = self.node_cache.wait_synced(timeout_s)
        return nodes and self.pod_cache.wait_synced(max(0.0, deadline - time.monotonic()))

    def holds(self, nodes: str, pods: str, timeout_s: float) -> bool:
        """Whether the Nodes cache reached resourceVersion ``nodes`` and the Pods cache
        ``pods`` within ``timeout_s`` (together), their change hooks run."""
        deadline = time.monotonic() + timeout_s
        held = self.node_cache.holds(nodes, timeout_s)
        return held and self.pod_cache.holds(pods, max(0.0, deadline - time.monotonic()))

    def join(self, timeout_s: float) -> bool:
        """Whether both threads (``stop``ped) ended within ``timeout_s`` (together)."""
        deadline = time.monotonic() + timeout_s
        ended = self.node_cache.join(timeout_s)
        return ended and self.pod_cache.join(max(0.0, deadline - time.monotonic()))

    def states(self) -> tuple[watch_cache.CacheState, ...]:
        return self.node_cache.state(), self.pod_cache.state()

    def _read(
        self,
        cache: watch_cache.WatchCache[T],
        pick: Callable[[T], U],
        listed: Callable[[], tuple[U, ...]],
    ) -> tuple[U, ...]:
        if cache.fresh(self._stale_after_s):
            return tuple(map(pick, cache.values()))
        state = cache.state()
        why = "not synced yet" if not state.synced else "its watch is broken"
        log.warning("%s cache %s: listing afresh for this tick", state.resource, why)
        self.fallback_lists += 1
        return listed()  # SourceError when this fails too: the tick decides nothing


def watched_cluster(
    client: Client,
    stale_after: timedelta,
    *,
    on_node_change: NodeHook | None = None,
    pod_annotations: Collection[str] = (),
    **cache_options: Any,
) -> WatchedCluster:
    """Caches of the cluster ``client`` talks to (not started: ``start()`` them with the loop),
    with ``on_node_change`` called on every Node change after the first list and of each
    pod's annotations only ``pod_annotations`` kept; ``cache_options`` go to both
    ``WatchCache``s (page size, backoff, watch timeout)."""
    api = kube_lists.RawApi(client.config)
    return WatchedCluster(
        watch_cache.WatchCache(
            api, kube_lists.NODES, read_node, on_change=on_node_change,
            **cache_options,
        ),
        watch_cache.WatchCache(
            api, kube_lists.UNFINISHED_PODS, pod_reader(pod_annotations), **cache_options
        ),
        kubernetes.KubernetesReader(client, api),
        stale_after,
        close=api.close,
        fallback_workloads=gang_pods.GangPodReader(client, api).pods,
    )


class WorkloadPods:
    """``WatchedCluster.workload_pods`` as the gang check's pod source."""

    def __init__(self, cluster: WatchedCluster) -> None:
        self._cluster = cluster

    def pods(self) -> tuple[workloads.WorkloadPod, ...]:
        return self._cluster.workload_pods()
