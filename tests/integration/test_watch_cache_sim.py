"""The watch caches against the simulator's API over real HTTP (docs/design.md#fast-path):
a paged first list, events keeping the cache current, a dropped watch resumed from its
resourceVersion, a 410 answered with a new list, a stale or unsynced cache never decided on,
and a GPU gone from the bus waking one tick that cordons through the breaker."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, cast

import lightkube
import pytest
from lightkube.resources.core_v1 import NodeStatus
from lightkube.types import PatchType

from gpuguard.actuators import nodes as node_writer
from gpuguard.clients import kube_lists
from gpuguard.controller import fast_path, runner, telemetry, tick
from gpuguard.errors import SourceError
from gpuguard.model import annotation_keys, fleet, node_conditions, settings
from gpuguard.model import metric_names as names
from gpuguard.sim import kubeapi, store
from gpuguard.sources import kubernetes, watch_cache, watched_cluster
from tests import fakes, waits
from tests.builders import Classifier
from tests.conftest import SimApi
from tests.integration.simnodes import NOW, seed_node

pytestmark = pytest.mark.integration

WAIT_S = 60.0  # an upper bound for a change to arrive; the tests wait on events, not on time
FAST_RETRY = {"backoff": lambda failures: 0.05, "timeout": lambda: 60}


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def config(port: int) -> lightkube.KubeConfig:
    return kubeapi.lightkube_config(f"http://127.0.0.1:{port}")


MakeCache = Callable[[kube_lists.RawApi], watch_cache.WatchCache[Any]]


def nodes_cache(**options: Any) -> MakeCache:
    return lambda raw: watch_cache.WatchCache(
        raw, kube_lists.NODES, kubernetes.node_from_dict, **{**FAST_RETRY, **options}
    )


@contextlib.contextmanager
def cache_for(make: MakeCache) -> Iterator[tuple[int, watch_cache.WatchCache[Any]]]:
    """A cache (not started) of the API to be served on the port it comes with; serve it
    inside the block, so the server stops (ending the watch) before the cache and its
    client do."""
    port = free_port()
    single = config(port).get()
    assert single is not None
    with contextlib.closing(kube_lists.RawApi(single)) as raw:
        cache = make(raw)
        try:
            yield port, cache
        finally:
            cache.stop(WAIT_S)


def started(cache: watch_cache.WatchCache[Any]) -> None:
    cache.start()
    assert cache.wait_synced(WAIT_S), "the cache never synced"


def names_in(cache: watch_cache.WatchCache[Any]) -> set[str]:
    return {o.name for o in cache.values()}


def seed(object_store: store.ObjectStore, *nodes: str, allocatable: str = "8") -> None:
    seeding = SimApi("", object_store, cast(kubeapi.KubeApiServer, None))  # writes the store only
    for name in nodes:
        seed_node(seeding, name, allocatable=allocatable)


def pod(name: str, phase: str, node: str = "gpu-1", gpus: str = "1") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "team-a", "labels": {"app": "train"}},
        "spec": {"nodeName": node, "containers": [
            {"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
        "status": {"phase": phase},
    }  # fmt: skip


def test_the_first_list_is_paged_and_events_keep_the_cache_current() -> None:
    world = store.ObjectStore()
    seed(world, "gpu-1", "gpu-2", "gpu-3")
    changes: list[tuple[str | None, str]] = []
    hook = nodes_cache(page_size=2, on_change=lambda b, a: changes.append((b and b.name, a.name)))
    with cache_for(hook) as (port, cache), kubeapi.serve(world, port=port) as server:
        started(cache)
        assert names_in(cache) == {"gpu-1", "gpu-2", "gpu-3"}
        lists = [r.query for r in server.requests if "watch" not in r.query]
        assert [q["limit"] for q in lists] == ["2", "2"]  # 3 nodes: two pages
        assert "continue" not in lists[0]
        assert lists[1]["continue"]
        seed(world, "gpu-4")
        world.merge_patch("Node", "", "gpu-2", {"spec": {"unschedulable": True}})
        world.delete("Node", "", "gpu-3")
        assert cache.wait_until(
            lambda: names_in(cache) == {"gpu-1", "gpu-2", "gpu-4"}
            and any(n.unschedulable for n in cache.values()),
            WAIT_S,
        )
        state = cache.state()
        watch = next(r.query for r in server.requests if r.query.get("watch") == "true")
    assert watch["allowWatchBookmarks"] == "true"
    assert int(watch["timeoutSeconds"]) == 60
    assert state.synced
    assert state.relists == 1
    assert state.resource_version == str(world.resource_version)
    assert changes == [(None, "gpu-4"), ("gpu-2", "gpu-2")]  # the first list wakes nothing


def test_a_cache_holds_a_version_only_once_the_change_hooks_of_it_ran() -> None:
    """Whoever waits for a version (``holds``: the demo before a tick, read-your-writes) also
    sees the wake its change brought."""
    world = store.ObjectStore()
    seed(world, "gpu-1")
    held_in_hook: list[bool] = []
    caches: list[watch_cache.WatchCache[Any]] = []

    def hook(before: fleet.Node | None, after: fleet.Node) -> None:
        held_in_hook.append(caches[0].holds(after.resource_version, 0.0))

    def make(raw: kube_lists.RawApi) -> watch_cache.WatchCache[Any]:
        caches.append(nodes_cache(on_change=hook)(raw))
        return caches[0]

    with cache_for(make) as (port, cache), kubeapi.serve(world, port=port):
        started(cache)
        world.merge_patch("Node", "", "gpu-1", {"spec": {"unschedulable": True}})
        assert cache.holds(str(world.resource_version), WAIT_S)
        assert held_in_hook == [False]  # ran, and before its version was published


def test_the_pod_cache_holds_only_unfinished_pods_as_the_tick_and_the_gang_check_read_them(
) -> None:
    world = store.ObjectStore()
    gang = {"scheduling.k8s.io/group-name": "job-1", "kubectl.kubernetes.io/last-applied": "{}"}
    world.create("Pod", "team-a", pod("running", "Running") | {"metadata": {
        "name": "running", "namespace": "team-a", "annotations": gang}})  # fmt: skip
    world.create("Pod", "team-a", pod("done", "Succeeded"))

    def pods(raw: kube_lists.RawApi) -> watch_cache.WatchCache[Any]:
        reader = watched_cluster.pod_reader({"scheduling.k8s.io/group-name"})
        return watch_cache.WatchCache(raw, kube_lists.UNFINISHED_PODS, reader, **FAST_RETRY)

    with cache_for(pods) as (port, cache), kubeapi.serve(world, port=port):
        started(cache)
        ((running, work),) = cache.values()
        assert (running.name, running.gpu_request, work.node) == ("running", 1, "gpu-1")
        assert work.annotations == {"scheduling.k8s.io/group-name": "job-1"}  # only those asked
        world.merge_patch("Pod", "team-a", "running", {"status": {"phase": "Succeeded"}})
        world.create("Pod", "team-a", pod("next", "Pending"))
        assert cache.wait_until(lambda: [p.name for p, _ in cache.values()] == ["next"], WAIT_S)


def test_a_dropped_watch_resumes_from_its_resource_version_without_a_new_list() -> None:
    world = store.ObjectStore()
    seed(world, "gpu-1")
    with cache_for(nodes_cache()) as (port, cache):
        with kubeapi.serve(world, port=port):
            started(cache)
        # the server is gone: the watch breaks and is retried after its backoff
        assert cache.wait_until(lambda: cache.state().broken_since is not None, WAIT_S)
        seed(world, "gpu-2")
        with kubeapi.serve(world, port=port):
            assert cache.wait_until(lambda: names_in(cache) == {"gpu-1", "gpu-2"}, WAIT_S)
            state = cache.state()
    assert state.relists == 1  # resumed, not listed again
    assert state.watch_errors >= 1
    assert state.broken_since is None


def test_a_resource_version_the_server_no_longer_keeps_means_a_new_list() -> None:
    world = store.ObjectStore(history=2)
    seed(world, "gpu-1")
    seen: list[str] = []
    with cache_for(nodes_cache(on_change=lambda b, a: seen.append(a.name))) as (port, cache):
        with kubeapi.serve(world, port=port):
            started(cache)
        assert cache.wait_until(lambda: cache.state().broken_since is not None, WAIT_S)
        seed(world, "gpu-2", "gpu-3", "gpu-4")  # more changes than the server keeps
        world.delete("Node", "", "gpu-1")
        with kubeapi.serve(world, port=port):  # the resumed watch is answered 410: list again
            assert cache.wait_until(lambda: cache.state().relists == 2, WAIT_S)
            assert names_in(cache) == {"gpu-2", "gpu-3", "gpu-4"}
    assert sorted(seen) == ["gpu-2", "gpu-3", "gpu-4"]  # what the new list found new


def guard_over(cluster: Any, metrics: fakes.FakeMetrics, client: lightkube.Client) -> tick.Guard:
    return tick.Guard(
        metrics=metrics,
        cluster=cluster,
        writer=node_writer.NodeWriter(client),
        classifier=Classifier(),
        settings=settings.GuardSettings(),
        clock=fakes.FakeClock(NOW),
    )


def test_a_cache_never_synced_lists_afresh_and_a_failed_list_decides_nothing() -> None:
    world = store.ObjectStore()
    seed(world, "gpu-1", "gpu-2")
    world.create("Pod", "team-a", pod("running", "Running"))
    with kubeapi.serve(world) as server, lightkube.Client(
        config=kubeapi.lightkube_config(server.url)
    ) as client:
        cluster = watched_cluster.watched_cluster(client, timedelta(seconds=30))  # not started
        guard = guard_over(cluster, fakes.FakeMetrics(), client)
        listed = guard.tick()
        server.fail_next("GET", "/api/v1/nodes", 500)
        failed = guard.tick()
        again = guard.tick()
        gang_check = watched_cluster.WorkloadPods(cluster).pods()
        cluster.stop()
    assert [(p.name, p.phase) for p in gang_check] == [("running", "Running")]
    assert listed.snapshot is not None
    assert {n.name for n in listed.snapshot.nodes} == {"gpu-1", "gpu-2"}
    assert (failed.error_kind, failed.decision) == ("source", None)
    assert "listing Nodes" in (failed.error or "")
    assert again.ok  # the next tick runs
    assert cluster.fallback_lists == 6  # nodes and pods, no pods on the failed tick; the gang


def test_a_watch_broken_longer_than_the_interval_is_not_decided_on() -> None:
    world = store.ObjectStore()
    seed(world, "gpu-1")
    clock = FakeMonotonic()
    pods = watch_cache.WatchCache[watched_cluster.CachedPod]
    with cache_for(nodes_cache(monotonic=clock)) as (port, nodes), lightkube.Client(
        config=config(port)
    ) as client, contextlib.closing(kube_lists.RawApi(client.config)) as raw:
        cluster = watched_cluster.WatchedCluster(
            nodes,
            pods(raw, kube_lists.UNFINISHED_PODS, watched_cluster.pod_reader(()), **FAST_RETRY),
            kubernetes.KubernetesReader(client),
            timedelta(seconds=30),
        )
        with kubeapi.serve(world, port=port):
            cluster.start()
            assert cluster.wait_synced(WAIT_S)
            assert [n.name for n in cluster.nodes()] == ["gpu-1"]
        assert nodes.wait_until(lambda: nodes.state().broken_since is not None, WAIT_S)
        assert [n.name for n in cluster.nodes()] == ["gpu-1"]  # broken, but not for long
        clock.now += 31
        with pytest.raises(SourceError, match="listing Nodes"):  # stale: list; the list fails
            cluster.nodes()
        with kubeapi.serve(world, port=port):
            assert nodes.wait_until(lambda: nodes.fresh(30), WAIT_S)
            assert [n.name for n in cluster.nodes()] == ["gpu-1"]
        cluster.stop()
    assert cluster.fallback_lists == 1


def xid79(node: str) -> fleet.MetricSample:
    return fleet.MetricSample(
        names.DCGM_XID_LAST, {"Hostname": node, "gpu": "4", "UUID": f"GPU-{node}"}, 79.0, NOW
    )


def gone_from_bus(client: lightkube.Client, node: str) -> None:
    """The agent's report, as it sends it: a strategic-merge patch of the node's status."""
    condition = {
        "type": node_conditions.GPU_FALLEN_OFF_BUS,
        "status": "True",
        "reason": node_conditions.GONE_FROM_BUS,
        "message": node_conditions.message(
            [node_conditions.GpuNamed("4", "0000:3b:00.0", f"GPU-{node}", 79)],
            "the GPU fell off the bus and its config space reads all ones",
        ),
        "lastTransitionTime": "2026-09-21T06:05:00Z",
    }
    client.patch(NodeStatus, node, {"status": {"conditions": [condition]}},
                 patch_type=PatchType.STRATEGIC)  # merged by type: Ready stays


@dataclass
class Ticks(tick.Guard):
    """The guard, with each finished tick announced (the test waits on it, not on time)."""

    results: list[tick.TickResult] = field(default_factory=list)
    ticked: threading.Condition = field(default_factory=threading.Condition)

    def tick(
        self, *, urgent: bool = False, woken: Callable[[], bool] | None = None
    ) -> tick.TickResult:
        result = super().tick(urgent=urgent, woken=woken)
        with self.ticked:
            self.results.append(result)
            self.ticked.notify_all()
        return result

    def wait_for(self, count: int) -> bool:
        with self.ticked:
            return self.ticked.wait_for(lambda: len(self.results) >= count, WAIT_S)

    def wait_until_quiet(self) -> bool:
        """Until a tick has seen every node's condition (each wake came before it)."""
        with self.ticked:
            return self.ticked.wait_for(self.last_saw_every_condition, WAIT_S)

    def last_saw_every_condition(self) -> bool:
        last = self.results[-1].snapshot if self.results else None
        return last is not None and all(n.gpu_conditions for n in last.nodes)


class Leading:
    def try_acquire_or_renew(self) -> bool:
        return True

    def is_leader(self) -> bool:
        return True

    def confirm_leader(self) -> bool:
        return True

    def release(self) -> None:
        return None


@contextlib.contextmanager
def guarded_fleet(
    world: store.ObjectStore, metrics: fakes.FakeMetrics
) -> Iterator[tuple[Ticks, runner.Runner, lightkube.Client]]:
    """``gpuguard run``'s loop over the served fleet, ticking once an hour unless woken."""
    port, fast = free_port(), fast_path.FastPath()
    # gpuguard's field manager, as controller.wiring builds its client: the breaker counts
    # only the isolations whose marks gpuguard wrote (managedFields)
    with lightkube.Client(config=config(port), field_manager=annotation_keys.FIELD_MANAGER
                          ) as client:
        server = kubeapi.KubeApiServer(world, port=port)
        server.start()
        cluster = watched_cluster.watched_cluster(
            client, timedelta(hours=1), on_node_change=fast.on_node_change, **FAST_RETRY
        )
        writer = node_writer.NodeWriter(client, on_written=cluster.node_written)
        guard = Ticks(metrics=metrics, cluster=cluster, writer=writer,
                      classifier=Classifier(), settings=settings.GuardSettings(),
                      clock=fakes.FakeClock(NOW))  # fmt: skip
        leading, guard_metrics = Leading(), telemetry.GuardMetrics()
        guard.is_leader = runner.WriteGate(leading, guard_metrics)
        loop = runner.Runner(guard, leading, guard_metrics, interval=timedelta(hours=1))
        stop = threading.Event()
        thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
        with fast_path.watching(cluster, fast, loop.wake, guard_metrics,
                                timedelta(seconds=WAIT_S)):  # fmt: skip
            thread.start()
            try:
                assert guard.wait_for(1), "the loop's first tick never ran"
                yield guard, loop, client
            finally:
                stop.set()
                loop.interrupt()
                thread.join(WAIT_S)
                server.stop()  # ends the watches before the caches stop


def counter(loop: runner.Runner, name: str) -> float:
    return loop.metrics.registry.get_sample_value(name) or 0.0


@pytest.mark.parametrize("exporter", [True, False], ids=["with-xid-series", "condition-alone"])
def test_a_gpu_gone_from_the_bus_wakes_one_tick_that_cordons_the_node(exporter: bool) -> None:
    world = store.ObjectStore()
    seed(world, "gpu-node-a")
    seed(world, "gpu-node-b", allocatable="7")
    metrics = fakes.FakeMetrics()
    with guarded_fleet(world, metrics) as (guard, loop, client):
        assert not guard.results[0].applied  # healthy at start; the next tick is an hour away
        if exporter:  # the Xid series Prometheus would show ~30 s later
            metrics.series = [xid79("gpu-node-b")]
        gone_from_bus(client, "gpu-node-b")
        assert guard.wait_for(2), "the condition did not wake a tick"
        urgent = guard.results[1]
    assert [a.node for a in urgent.applied] == ["gpu-node-b"]
    assert world.get("Node", "", "gpu-node-b")["spec"]["unschedulable"] is True
    assert not world.get("Node", "", "gpu-node-a")["spec"].get("unschedulable")
    assert counter(loop, "gpuguard_urgent_wakes_total") == 1
    assert counter(loop, "gpuguard_urgent_ticks_total") == 1
    marks = world.get("Node", "", "gpu-node-b")["metadata"]["annotations"]
    assert marks[annotation_keys.REASON] == "xid-79"


@pytest.mark.parametrize("exporter", [True, False], ids=["with-xid-series", "condition-alone"])
def test_many_nodes_gone_from_the_bus_at_once_still_trip_the_breaker(exporter: bool) -> None:
    fleet_names = [f"gpu-{i:02}" for i in range(12)]
    world = store.ObjectStore()
    seed(world, *fleet_names, allocatable="7")
    metrics = fakes.FakeMetrics()
    with guarded_fleet(world, metrics) as (guard, _, client):
        if exporter:  # a broken exporter, say, and the conditions with it
            metrics.series = [xid79(n) for n in fleet_names]
        for name in fleet_names:
            gone_from_bus(client, name)
        assert guard.wait_for(2)
        assert guard.wait_until_quiet()
        woken = guard.results[1:]
    decisions = [r.decision for r in woken if r.decision is not None]
    assert any(d.breaker.tripped for d in decisions)
    level = decisions[0].breaker.limits.level
    cordoned = [n for n in fleet_names if world.get("Node", "", n)["spec"].get("unschedulable")]
    # however many ticks the wakes made, the unconfirmed isolations stay within the level limit
    assert len(cordoned) <= level < len(fleet_names)
    assert len(woken) < len(fleet_names)  # wakes before a tick runs are that one tick


def test_the_cache_state_is_exported_as_metrics() -> None:
    world = store.ObjectStore()
    seed(world, "gpu-1", "gpu-2")
    with guarded_fleet(world, fakes.FakeMetrics()) as (_, loop, _client):
        def sample(name: str, resource: str) -> float | None:
            return loop.metrics.registry.get_sample_value(name, {"resource": resource})

        assert sample("gpuguard_watch_cache_synced", "Nodes") == 1
        assert sample("gpuguard_watch_cache_objects", "Nodes") == 2
        assert sample("gpuguard_watch_relists_total", "Pods") == 1
        assert counter(loop, "gpuguard_watch_fallback_lists_total") == 0



def test_the_guard_reads_its_own_node_writes_from_the_cache() -> None:
    world = store.ObjectStore()
    seed(world, "gpu-1", "gpu-2")
    with kubeapi.serve(world) as server, lightkube.Client(
        config=kubeapi.lightkube_config(server.url)
    ) as client:
        cluster = watched_cluster.watched_cluster(client, timedelta(seconds=30), **FAST_RETRY)
        writer = node_writer.NodeWriter(client, on_written=cluster.node_written)
        cluster.start()
        assert cluster.wait_synced(WAIT_S)
        (one, _) = sorted(cluster.nodes(), key=lambda n: n.name)
        writer.set_schedulable(one, {annotation_keys.REASON: "xid-79"}, unschedulable=True)
        after = {n.name: n.unschedulable for n in cluster.nodes()}  # at once: no waiting here
        impatient = watched_cluster.WatchedCluster(
            cluster.node_cache, cluster.pod_cache, kubernetes.KubernetesReader(client),
            timedelta(seconds=30), catch_up=timedelta(0),
        )  # fmt: skip
        impatient.node_written(str(world.resource_version + 1000))  # a write not yet delivered
        late = {n.name for n in impatient.nodes()}
        server.stop()
        cluster.stop()
    assert after == {"gpu-1": True, "gpu-2": False}
    assert late == {"gpu-1", "gpu-2"}
    assert impatient.fallback_lists == 1  # listed afresh rather than read without the write


def test_a_steady_tick_reads_the_caches_and_lists_nothing() -> None:
    world = store.ObjectStore()
    seed(world, *(f"gpu-{i}" for i in range(20)))
    for i in range(40):
        world.create("Pod", "team-a", pod(f"p{i}", "Running", node=f"gpu-{i % 20}"))
    with kubeapi.serve(world) as server, lightkube.Client(
        config=kubeapi.lightkube_config(server.url)
    ) as client:
        cluster = watched_cluster.watched_cluster(client, timedelta(seconds=30), **FAST_RETRY)
        cluster.start()
        assert cluster.wait_synced(WAIT_S)
        # a cache reads as synced once listed, a moment before its watch request goes out:
        # that request is the cache's, not the tick's
        assert waits.eventually(lambda: server.traffic().verb("watch").requests >= 2, WAIT_S)
        guard = guard_over(cluster, fakes.FakeMetrics(), client)
        before = server.traffic()
        result = guard.tick()
        spent = server.traffic() - before
        server.stop()
        cluster.stop()
    assert result.snapshot is not None
    assert (len(result.snapshot.nodes), len(result.snapshot.pods)) == (20, 40)
    assert spent.total.requests == 0  # nothing listed, nothing read: the caches answered
    assert cluster.fallback_lists == 0


def test_sigterm_ends_the_wait_for_the_first_lists() -> None:
    with lightkube.Client(config=config(free_port())) as client:  # nothing answers there
        cluster = watched_cluster.watched_cluster(client, timedelta(seconds=30), **FAST_RETRY)
        stop = threading.Event()
        stop.set()  # as the SIGTERM handler does
        entered = threading.Event()

        def run() -> None:
            metrics, nobody = telemetry.GuardMetrics(), lambda node, why: None
            fast = fast_path.FastPath()
            with fast_path.watching(cluster, fast, nobody, metrics, timedelta(hours=1), stop):
                entered.set()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        assert entered.wait(WAIT_S), "waited for caches that can never sync"
        thread.join(WAIT_S)
    assert not cluster.node_cache.state().synced
