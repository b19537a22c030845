"""The fast path (docs/design.md#fast-path): a Node change that brings an unambiguous GPU
hardware fault (``model.node_conditions.newly_urgent``) wakes the loop for a tick at once —
the same tick, policy, breaker and write path as every other; nothing is decided here.

``watching`` runs the watch caches for as long as the loop runs: started (and given up to
one interval to sync, so the first tick reads the cache rather than listing the cluster a
second time), exported as metrics, stopped on the way out.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

from gpuguard.controller import telemetry
from gpuguard.model import fleet, node_conditions, ports
from gpuguard.sources import watched_cluster

log = logging.getLogger(__name__)
_STOP_CHECK_S = 0.2  # how often the wait for the first lists looks at the stop event

Wake = Callable[[str, str], None]


class FastPath:
    """The node cache's change hook; ``connect`` it to ``Runner.wake`` once the loop exists
    (until then a change wakes nothing: the loop's first tick sees every node anyway)."""

    def __init__(self) -> None:
        self._wake: Wake | None = None

    def connect(self, wake: Wake) -> None:
        self._wake = wake

    def on_node_change(self, before: fleet.Node | None, after: fleet.Node) -> None:
        was = before.gpu_conditions if before is not None else None
        if not node_conditions.newly_urgent(was, after.gpu_conditions):
            return
        condition = node_conditions.unambiguous_fault(after.gpu_conditions)
        why = f"{condition.type}/{condition.reason}: {condition.message}" if condition else ""
        if self._wake is not None:
            self._wake(after.name, why)


@contextmanager
def watching(
    cluster: ports.ClusterReader,
    fast: FastPath,
    wake: Wake,
    metrics: telemetry.GuardMetrics,
    sync_within: timedelta,
    stop: threading.Event | None = None,
) -> Iterator[None]:
    """Run ``cluster``'s watch caches (when it has any) while the block runs; the wait for
    their first lists ends early when ``stop`` is set (SIGTERM)."""
    if not isinstance(cluster, watched_cluster.WatchedCluster):
        yield
        return
    metrics.watch_caches(cluster.states, lambda: cluster.fallback_lists)
    fast.connect(wake)
    cluster.start()
    try:
        if not _synced(cluster, sync_within.total_seconds(), stop or threading.Event()):
            log.warning("watch caches not synced within %s: ticks list afresh until they are",
                        sync_within)  # fmt: skip
        yield
    finally:
        cluster.stop()


def _synced(
    cluster: watched_cluster.WatchedCluster, within_s: float, stop: threading.Event
) -> bool:
    deadline = time.monotonic() + within_s
    while not stop.is_set() and (left := deadline - time.monotonic()) > 0:
        if cluster.wait_synced(min(left, _STOP_CHECK_S)):
            return True
    return False
