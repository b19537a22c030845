"""The demo waits, before each tick, for the newest change each watch cache is sent, and
stops loudly rather than let the guard decide on a cache behind the world
(docs/design.md#fast-path)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from gpuguard.demo import guard_reads
from gpuguard.sim import store
from gpuguard.sources import watch_cache, watched_cluster


class FakeCluster:
    def __init__(self, held: bool) -> None:
        self.held, self.asked = held, list[tuple[str, str]]()

    def holds(self, nodes: str, pods: str, timeout_s: float) -> bool:
        self.asked.append((nodes, pods))
        return self.held

    def states(self) -> tuple[watch_cache.CacheState, ...]:
        return ()


def pod(name: str, phase: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team-a"}, "spec": {"nodeName": "gpu-1"},
            "status": {"phase": phase}}  # fmt: skip


def waited(cluster: FakeCluster, caught: guard_reads.CaughtUp) -> None:
    caught.wait(cast(watched_cluster.WatchedCluster, cluster))


def test_the_caches_are_waited_for_up_to_the_newest_change_their_watches_are_sent() -> None:
    world = store.ObjectStore()
    caught = guard_reads.CaughtUp(world)
    world.create("Node", "", {"metadata": {"name": "gpu-1"}})  # 1
    world.create("Pod", "team-a", pod("train", "Running"))  # 2
    world.merge_patch("Pod", "team-a", "train", {"status": {"phase": "Succeeded"}})  # 3: leaves
    world.delete("Pod", "team-a", "train")  # 4: a finished pod: the watch is not sent it
    world.create("Pod", "team-a", pod("done", "Failed"))  # 5: neither
    world.create("ConfigMap", "team-a", {"metadata": {"name": "c"}})  # 6: not watched
    cluster = FakeCluster(held=True)
    waited(cluster, caught)
    waited(cluster, caught)  # nothing changed since: nothing to wait for
    assert cluster.asked == [("1", "3")]


def test_a_cache_behind_the_world_stops_the_demo() -> None:
    world = store.ObjectStore()
    caught = guard_reads.CaughtUp(world)
    world.create("Node", "", {"metadata": {"name": "gpu-1"}})
    with pytest.raises(guard_reads.DemoError, match="did not reach Nodes 1"):
        waited(FakeCluster(held=False), caught)
