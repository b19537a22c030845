"""The demo guard reads the simulator's cluster as ``gpuguard run`` reads a real one: watch
caches of Nodes and unfinished Pods over HTTP (``controller.wiring.cluster_reads``), and a
Node change that brings an unambiguous hardware fault waking a tick through the product's
``controller.fast_path.FastPath`` (docs/design.md#fast-path).

The world is deterministic; the caches' threads follow the API in wall time. So before the
guard ticks, and before the harness asks whether a wake came, ``CaughtUp.wait`` waits until
each cache holds the newest change of the store its watch is sent (a Node change; a Pod
change in or leaving the unfinished selection, as the simulator's watch sends them). A cache
that does not within ``CATCH_UP_S`` ends the run with ``DemoError``: the guard never decides
on a cache behind the world. The caches' staleness rule is about their watch connection, in
wall time; the simulated clock (weeks in seconds) is not theirs.
"""

from __future__ import annotations

import threading

from gpuguard.clients import kube_lists
from gpuguard.errors import GpuguardError
from gpuguard.sim import kubeapi, selectors, store
from gpuguard.sources import watched_cluster

CATCH_UP_S = 30.0  # far above a watch event's delay, even on a loaded machine
JOIN_S = 10.0  # the watches end when the simulator's API server stops


class DemoError(GpuguardError):
    """The demo cannot go on deterministically (a cache behind the world, a leaked thread)."""


class Wakes:
    """``FastPath``'s wake in the demo: a tick is due at once (read with ``take``)."""

    def __init__(self) -> None:
        self._woken = threading.Event()

    def wake(self, node: str, why: str) -> None:
        self._woken.set()

    def take(self) -> bool:
        """Whether a wake came since the last ``take``."""
        woken = self._woken.is_set()
        self._woken.clear()
        return woken


class CaughtUp:
    """The newest resourceVersion each cache is sent, followed through the store's history."""

    def __init__(self, objects: store.ObjectStore) -> None:
        self._objects = objects
        self._scanned = objects.resource_version  # the caches' first lists come after
        self._nodes = self._pods = 0
        self._every_label = selectors.parse_label_selector(None)
        self._unfinished = selectors.parse_field_selector(
            kube_lists.UNFINISHED_PODS.field_selector
        )

    def wait(self, cluster: watched_cluster.WatchedCluster) -> None:
        """Return once both caches hold every change the store made so far that their
        watches are sent (and their hooks ran); DemoError when they do not in time."""
        if self._objects.resource_version == self._scanned:
            return
        try:
            changes, through = self._objects.changes_after(self._scanned)
        except store.StoreGone as e:
            raise DemoError(f"the store's history no longer reaches resourceVersion "
                            f"{self._scanned}: {e}") from e  # fmt: skip
        for change in changes:
            if change.kind == kube_lists.NODES.kind:
                self._nodes = change.resource_version
            elif change.kind == kube_lists.UNFINISHED_PODS.kind and self._sent_pod(change):
                self._pods = change.resource_version
        if not cluster.holds(str(self._nodes), str(self._pods), CATCH_UP_S):
            states = ", ".join(f"{s.resource} at {s.resource_version or 'nothing'}"
                               for s in cluster.states())  # fmt: skip
            raise DemoError(f"watch caches did not reach Nodes {self._nodes}, Pods "
                            f"{self._pods} within {CATCH_UP_S:.0f}s ({states})")  # fmt: skip
        self._scanned = through

    def _sent_pod(self, change: store.Change) -> bool:
        """Whether the pods' watch is sent ``change`` (the simulator's own rule: the pod is,
        or was, unfinished)."""
        return kubeapi.watch_event(change, self._every_label, self._unfinished) is not None
