"""Benchmark: one isolation decision over a synthetic fleet, and queries per tick.

Prints the wall time and peak memory of ``policy.isolate.decide`` over a 10,000-node x
8-GPU snapshot (targets: <= 1 s, <= 300 MB), the same for a metric storm (30 % of the nodes
report Xid 79 with a GPU gone at one instant, and a tick later with the 2,999 withheld marks on
their nodes: the breaker's JSON marks parsed on every tick), and the number of Prometheus
queries one tick issues at 100 and at 10,000 nodes (they must be equal: the plan does not grow
with the fleet).

    .venv/bin/python bench/decide_bench.py [--nodes 10000] [--gpus 8]
"""

from __future__ import annotations

import argparse
import json
import resource
import time
import tracemalloc
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import httpx

from gpuguard.catalog import xid as xid_catalog
from gpuguard.model import fleet, settings, withheld
from gpuguard.model import metric_names as names
from gpuguard.policy import isolate
from gpuguard.sources import prometheus

NOW = datetime(2026, 9, 21, 6, 0, tzinfo=UTC)


def synthetic_fleet(n_nodes: int, gpus: int) -> fleet.FleetSnapshot:
    """1 % of nodes lost a GPU after a hardware Xid; 2 % of GPUs carry a user Xid;
    a tenth of nodes have a pod per GPU."""
    nodes, samples, gpu_list, pods = [], [], [], []
    for i in range(n_nodes):
        name = f"gpu-node-{i:05d}"
        faulty = i % 100 == 7
        nodes.append(fleet.Node(name, f"boot-{i}", gpus, gpus - 1 if faulty else gpus,
                                conditions={"Ready": "True"}, resource_version=str(i)))
        samples.append(fleet.MetricSample(names.GPU_LOSS_HELD, {"node": name},
                                          1.0 if faulty else 0.0, NOW))
        for g in range(gpus):
            labels = {"Hostname": name, "gpu": str(g), "UUID": f"GPU-{i}-{g}"}
            gpu_list.append(fleet.Gpu(name, g, f"GPU-{i}-{g}", f"0000:{g:02x}:00.0", "H100"))
            if faulty and g == 3:
                samples.append(fleet.MetricSample(names.DCGM_XID_LAST, labels, 48.0, NOW))
            elif (i * gpus + g) % 50 == 0:
                samples.append(fleet.MetricSample(names.DCGM_XID_LAST, labels, 13.0, NOW))
                samples.append(fleet.MetricSample(names.XID_LAST_24H_AGO, labels, 13.0, NOW))
            if i % 10 == 0:
                pods.append(fleet.Pod("train", f"job-{i}-{g}", name, fleet.PodPhase.RUNNING, 1))
    return fleet.FleetSnapshot(NOW, tuple(nodes), tuple(gpu_list), tuple(pods), tuple(samples))


def storm(snapshot: fleet.FleetSnapshot, share: float = 0.3) -> fleet.FleetSnapshot:
    """``share`` of the nodes report Xid 79 on GPU 0 with one GPU gone, at one instant."""
    hit = {n.name for i, n in enumerate(snapshot.nodes) if i < share * len(snapshot.nodes)}
    nodes = tuple(
        replace(n, gpu_allocatable=n.gpu_capacity - 1) if n.name in hit else n
        for n in snapshot.nodes
    )
    extra = tuple(
        fleet.MetricSample(names.DCGM_XID_LAST, {"Hostname": name, "gpu": "0"}, 79.0, NOW)
        for name in sorted(hit)
    )
    return replace(snapshot, nodes=nodes, samples=snapshot.samples + extra)


def with_marks(
    snapshot: fleet.FleetSnapshot, decision: isolate.IsolationDecision
) -> fleet.FleetSnapshot:
    """The fleet a tick later: the breaker's marks written on the withheld nodes."""
    marks = {m.node: m.value for m in decision.markings if m.value is not None}
    nodes = tuple(
        replace(n, annotations={**n.annotations, withheld.KEY: marks[n.name]})
        if n.name in marks
        else n
        for n in snapshot.nodes
    )
    return replace(snapshot, nodes=nodes)


def time_decide(snapshot: fleet.FleetSnapshot) -> tuple[float, float, int]:
    catalog = xid_catalog.load_catalog()
    guard = settings.GuardSettings()
    tracemalloc.start()
    started = time.perf_counter()
    decision = isolate.decide(snapshot, catalog, guard)
    elapsed = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return elapsed, peak / 2**20, len(decision.actions) + len(decision.findings)


def time_storm(snapshot: fleet.FleetSnapshot) -> tuple[float, float, int, int]:
    """Seconds of the trip tick and of the next one (marks parsed), isolations, marks."""
    catalog, guard = xid_catalog.load_catalog(), settings.GuardSettings()
    stormy = storm(snapshot)
    started = time.perf_counter()
    tripped = isolate.decide(stormy, catalog, guard)
    first = time.perf_counter() - started
    later = with_marks(stormy, tripped)
    started = time.perf_counter()
    isolate.decide(later, catalog, guard)
    second = time.perf_counter() - started
    return first, second, len(tripped.actions), len(tripped.markings)


def queries_per_tick(n_nodes: int) -> int:
    fresh = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {}, "value": [NOW.timestamp(), str(NOW.timestamp())]}]}}).encode()
    rows = [{"metric": {"Hostname": f"n{i}", "gpu": "0"}, "value": [NOW.timestamp(), "13"]}
            for i in range(n_nodes)]
    many = json.dumps({"status": "success",
                       "data": {"resultType": "vector", "result": rows}}).encode()

    def answer(request: httpx.Request) -> httpx.Response:
        fresh_query = request.url.params["query"].startswith("max(timestamp(")
        return httpx.Response(200, content=fresh if fresh_query else many)

    plan = prometheus.QueryPlan(timedelta(minutes=10), timedelta(hours=24))
    client = httpx.Client(transport=httpx.MockTransport(answer))
    source = prometheus.PrometheusSource("http://prometheus:9090", plan, client=client)
    source.samples(NOW)
    source.close()
    return source.queries_issued


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--gpus", type=int, default=8)
    args = parser.parse_args()
    started = time.perf_counter()
    snapshot = synthetic_fleet(args.nodes, args.gpus)
    built = time.perf_counter() - started
    seconds, peak_mb, outcomes = time_decide(snapshot)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    trip_s, next_s, isolated, marked = time_storm(snapshot)
    small, large = queries_per_tick(100), queries_per_tick(args.nodes)
    print(f"fleet: {args.nodes} nodes x {args.gpus} GPUs, {len(snapshot.samples)} samples "
          f"(built in {built:.2f} s)")
    print(f"decide: {seconds:.3f} s wall (target <= 1 s), {outcomes} actions+findings")
    print(f"decide: {peak_mb:.1f} MiB allocated at peak (tracemalloc); "
          f"process peak RSS {rss_mb:.0f} MiB (target <= 300 MB)")
    print(f"storm (30 % at once): trip tick {trip_s:.3f} s, next tick with {marked} marks "
          f"{next_s:.3f} s (target <= 1 s); {isolated} isolated, {marked} withheld")
    print(f"Prometheus queries per tick: {small} at 100 nodes, {large} at {args.nodes} nodes "
          f"(ratio {large / small:.2f})")


if __name__ == "__main__":
    main()
