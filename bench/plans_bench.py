"""Benchmark: the once-a-minute Prometheus plans of the guard's regular tick — the phantom check
(``sources.gpu_metrics.GpuQueryPlan``) and the fleet-health check
(``sources.fleet_health.HealthQueryPlan``) — over a healthy fleet of 1,000 and 10,000 nodes.

What it answers: how many series and bytes each plan's answers hold, and how long the step
takes to fetch, parse and evaluate them, when nothing is wrong. ``tick_bench.py`` measures
the core tick without these steps.

The stand-in Prometheus runs in its own process (``/api/v1/query`` only) and answers each of
the plan's queries, by the sample name the plan stores it under, with what a healthy fleet
answers (``HealthyFleet``): 8 H100 GPUs per node, each held by a training pod (4 pods of 2
GPUs), busy (util 97 %, SM active 0.8, framebuffer 60 GiB, P0, 600 W), the agent's process
count 1 per GPU, every clock-event reason off except ``sw-power-cap`` (a GPU at its power
limit under full load reports it all the time), every NVLink, PCIe and InfiniBand error
counter flat (8 ports per node), the agent's topology (28 NVLink pairs and 8 NUMA series per
node). A query whose PromQL filters on its value (``> 0``, ``>= x``) is answered without the
series a healthy fleet filters out; a query it does not know fails the bench (HTTP 400), so a
changed plan cannot read as healthy. Series are encoded once; an answer joins them, so the
stand-in costs the reader next to nothing.

The reader, in a fresh process per plan and size, runs the step as the guard's tick runs it
(``controller.phantom_watch.PhantomWatch``, ``controller.fleet_health.FleetHealthWatch`` with
no pods and the topology cache ``controller.wiring`` gives it) with default settings, and must
find nothing and leave no check unchecked. ``fleet-health`` is the step's first run (the
topology read fleet-wide, as every ``fleet.topology_refresh``), ``fleet-health-steady`` the
run a minute later (the topology kept): its figures are that run's alone.

    .venv/bin/python bench/plans_bench.py                    # 1,000 and 10,000 nodes
    .venv/bin/python bench/plans_bench.py --sizes 20         # a quick smoke run
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import re
import resource
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from multiprocessing.connection import Connection

import httpx

import tick_bench
from gpuguard.controller import fleet_health, phantom_watch, wiring
from gpuguard.model import metric_names as names
from gpuguard.model import settings as settings_model
from gpuguard.model import workloads
from gpuguard.sources import fleet_health as health_source
from gpuguard.sources import gpu_metrics, prometheus
from tick_bench import BenchError

GPUS_PER_NODE = 8
IB_PORTS = 8
PLANS = ("phantom", "fleet-health", "fleet-health-steady")
PRODUCT = "NVIDIA H100 80GB HBM3"
DRIVER = "570.172.08"
# A healthy training GPU's telemetry (dcgm-exporter units), the same at every stat.
BUSY = {
    names.DCGM_GPU_UTIL: 97.0, names.DCGM_SM_ACTIVE: 0.8, names.DCGM_GR_ENGINE_ACTIVE: 0.85,
    names.DCGM_DRAM_ACTIVE: 0.4, names.DCGM_TENSOR_ACTIVE: 0.3, names.DCGM_SM_OCCUPANCY: 0.4,
    names.DCGM_FB_USED: 61_440.0, names.DCGM_POWER: 600.0, names.DCGM_PSTATE: 0.0,
    names.DCGM_SM_CLOCK: 1_980.0,
}  # fmt: skip
POWER_CAP_SHARE = 0.6  # of the window a fully loaded GPU reports sw-power-cap
# A comparison on a parenthesised expression's value (``(...) > 0``, ``(...) >= 0.25``): what
# a healthy fleet answers to such a query has none of the zero-valued series.
_VALUE_FILTER = re.compile(r"\)\s*>=?\s*[-+]?[\d.]")

Value = Callable[[float], float]  # a series' value at the evaluation time (Unix seconds)


def node_name(i: int) -> str:
    return f"gpu-node-{i:05d}"


def gpu_labels(i: int, g: int) -> dict[str, str]:
    """dcgm-exporter's labels on a GPU's series (GPU Operator, pod mapping on)."""
    node = node_name(i)
    return {
        "gpu": str(g), "UUID": f"GPU-{i:08x}-{g:04x}-4a3e-9b1c-5d2f7e8a{g:04x}",
        "pci_bus_id": f"00000000:{0x18 + g:02X}:00.0", "device": f"nvidia{g}",
        "modelName": PRODUCT, "Hostname": node, "DCGM_FI_DRIVER_VERSION": DRIVER,
        "container": "main", "namespace": "train", "pod": f"train-llm-{i:05d}-{g // 2}",
        "instance": f"10.42.{i % 256}.{i // 256 % 256}:9400", "job": "nvidia-dcgm-exporter",
    }  # fmt: skip


def _head(labels: Mapping[str, str]) -> str:
    """One vector item's JSON up to its sample: ``{"metric":{...},"value":[``."""
    return f'{{"metric":{json.dumps(labels, separators=(",", ":"))},"value":['


@dataclass(frozen=True)
class Rows:
    """A healthy fleet's series for one sample name: their label sets and value."""

    labels: Callable[[], Iterator[dict[str, str]]]
    value: Value
    zero: bool = False  # every series is 0: a value filter leaves none


class HealthyFleet:
    """What Prometheus answers a plan's queries with for a healthy fleet of ``n`` nodes."""

    def __init__(self, n: int, plan: Mapping[str, str]) -> None:
        self._n = n
        rows = self._rows()
        self._by_query: dict[str, list[tuple[list[str], Value]]] = {}
        for name, promql in plan.items():
            found = rows.get(name)
            if found is None:
                raise BenchError(f"the bench has no healthy answer for {name!r}")
            filtered = _VALUE_FILTER.search(promql) is not None
            self._by_query[promql] = [
                ([_head(labels) for labels in r.labels()], r.value)
                for r in (found(promql) if callable(found) else [found])
                if not (r.zero and filtered)
            ]
        self._lock = threading.Lock()
        self.queries = self.series = self.bytes = 0

    def counters(self) -> dict[str, int]:
        """What was asked and answered so far (``/bench/counters``)."""
        return {"queries": self.queries, "series": self.series, "bytes": self.bytes}

    def _gpus(self, extra: Mapping[str, str] | None = None) -> Iterator[dict[str, str]]:
        for i in range(self._n):
            for g in range(GPUS_PER_NODE):
                yield gpu_labels(i, g) | dict(extra or {})

    def _nodes(self, key: str) -> Iterator[dict[str, str]]:
        return ({key: node_name(i)} for i in range(self._n))

    def _rows(self) -> dict[str, Rows | Callable[[str], list[Rows]]]:
        fleet_wide = Rows(lambda: iter([{}]), lambda t: t - 2)
        rows: dict[str, Rows | Callable[[str], list[Rows]]] = {
            names.FRESHNESS_KSM: Rows(lambda: iter([{}]), lambda t: t - 3),
            names.FRESHNESS_DCGM: fleet_wide,
            names.GPU_SEEN_AT_WINDOW_START:
                Rows(lambda: self._gpus({"__name__": names.DCGM_GPU_UTIL}), lambda t: 97.0),
            names.NODE_GPU_PODS_MAX: Rows(lambda: self._nodes("node"), lambda t: 8.0),
            names.PHANTOM_SIGNATURE_MINUTES: Rows(lambda: iter([]), lambda t: 0.0),
            # every GPU held by a pod: no node has a GPU busy without one
            names.PHANTOM_CANDIDATE_NODES: Rows(lambda: iter([]), lambda t: 1.0),
            names.GPU_PROCESSES_MAX: Rows(self._processes, lambda t: 1.0),
            names.GPU_POD_MAPPING: self._mapping,
            names.GPU_NVLINK_PEER: Rows(self._links, lambda t: 1.0),
            names.GPU_NUMA_NODE: Rows(self._numa, lambda t: 1.0),
            names.GPU_TOPOLOGY_CHANGES: Rows(lambda: iter([]), lambda t: 1.0),  # none changed
        }  # fmt: skip
        for metric, value in BUSY.items():
            for stat in names.WINDOW_STATS:
                extra = {"__name__": metric} if stat == "last" else {}
                rows[names.window_stat(metric, stat)] = Rows(
                    lambda extra=extra: self._gpus(extra), lambda t, v=value: v
                )
        for window in (names.SHORT, names.LONG):
            rows[names.windowed(names.THROTTLE_FRACTION, window)] = self._throttle
            rows[names.windowed(names.IB_ERRORS_INCREASE, window)] = Rows(
                lambda window=window: self._ib(window), lambda t: 0.0, zero=True
            )
        rows[names.windowed(names.NVLINK_ERRORS_INCREASE, names.SHORT)] = Rows(
            lambda: (labels for c in health_source.NVLINK_COUNTERS
                     for labels in self._gpus({"counter": c})),
            lambda t: 0.0, zero=True,
        )  # fmt: skip
        rows[names.windowed(names.PCIE_REPLAYS_INCREASE, names.SHORT)] = Rows(
            self._gpus, lambda t: 0.0, zero=True
        )
        gpus = self._n * GPUS_PER_NODE
        counts = {names.THROTTLE_FRACTION: gpus, names.PCIE_REPLAYS_INCREASE: gpus,
                  names.NVLINK_ERRORS_INCREASE: gpus * len(health_source.NVLINK_COUNTERS),
                  names.IB_ERRORS_INCREASE: self._n * IB_PORTS * len(health_source.IB_COUNTERS)}
        for what, count in counts.items():  # the series each kind had before its filter
            rows[names.coverage(what)] = Rows(lambda: iter([{}]), lambda t, c=count: float(c))
        return rows

    def _processes(self) -> Iterator[dict[str, str]]:
        for labels in self._gpus():
            yield {"node": labels["Hostname"], "uuid": labels["UUID"]}

    def _throttle(self, promql: str) -> list[Rows]:
        """Per GPU, each clock-event reason the query asks for: sw-power-cap set for
        ``POWER_CAP_SHARE`` of the window, the others never."""
        return [
            Rows(lambda reason=reason: self._gpus({"reason": reason}),
                 lambda t, reason=reason: POWER_CAP_SHARE if reason == "sw-power-cap" else 0.0,
                 zero=reason != "sw-power-cap")
            for reason in names.CLOCK_EVENT_REASON_BITS if f'"reason", "{reason}"' in promql
        ]  # fmt: skip

    def _mapping(self, promql: str) -> list[Rows]:
        """Every GPU's util series (each held by a pod), or what ``group by (...)`` keeps."""
        kept = re.match(r"group by \(([^)]*)\)", promql)
        if kept is None:
            return [Rows(lambda: self._gpus({"__name__": names.DCGM_GPU_UTIL}), lambda t: 97.0)]
        keys = {k.strip() for k in kept.group(1).split(",")}
        grouped = ({k: v for k, v in labels.items() if k in keys} for labels in self._gpus())
        return [Rows(lambda: grouped, lambda t: 1.0)]

    def _links(self) -> Iterator[dict[str, str]]:
        for i in range(self._n):
            for a in range(GPUS_PER_NODE):
                for b in range(a + 1, GPUS_PER_NODE):
                    yield {"node": node_name(i), "gpu": str(a), "peer": str(b), "link": "NV18"}

    def _numa(self) -> Iterator[dict[str, str]]:
        for i in range(self._n):
            for g in range(GPUS_PER_NODE):
                yield {"node": node_name(i), "gpu": str(g), "numa": str(g // 4)}

    def _ib(self, window: str) -> Iterator[dict[str, str]]:
        counters = health_source.IB_COUNTERS if window == names.SHORT else {"link_downed": ""}
        for i in range(self._n):
            for port in range(IB_PORTS):
                for counter in counters:
                    yield {"device": f"mlx5_{port}", "port": "1", "counter": counter,
                           "instance": f"{node_name(i)}:9100", "job": "node-exporter"}

    def answer(self, query: str, at: float) -> tuple[int, bytes]:
        """(HTTP status, body) of ``GET /api/v1/query`` as Prometheus answers it
        (https://prometheus.io/docs/prometheus/latest/querying/api/#instant-queries)."""
        found = self._by_query.get(query)
        if found is None:
            return tick_bench.no_answer(query)
        result = ",".join(
            (point + ",").join(heads) + point
            for heads, value in found
            if heads and (point := f'{at},"{value(at)!r}"]}}')
        )
        encoded = tick_bench.vector_body(result)
        with self._lock:
            self.queries += 1
            self.series += sum(len(heads) for heads, _ in found)
            self.bytes += len(encoded)
        return 200, encoded


def serve(n: int, plan: Mapping[str, str], conn: Connection) -> None:
    """The stand-in, in its own process: sends its port (or the BenchError), serves until told."""
    try:
        fleet_ = HealthyFleet(n, plan)
        handler = tick_bench.prometheus_handler(fleet_, fleet_.counters)
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    except BenchError as e:
        conn.send(e)
        return
    threading.Thread(target=server.serve_forever, daemon=True).start()
    conn.send(server.server_address[1])
    conn.recv()  # any message: stop
    server.shutdown()


def phantom_plan(guard: settings_model.GuardSettings) -> gpu_metrics.GpuQueryPlan:
    """The phantom step's plan, as ``controller.wiring`` makes it."""
    return gpu_metrics.GpuQueryPlan.for_settings(guard.phantom)


def health_plan(guard: settings_model.GuardSettings) -> dict[str, str]:
    """The fleet-health step's queries, as ``controller.wiring`` makes them: the plan without
    the topology, the topology plan read fleet-wide (its scoped form is not answered: a warm
    cache asks none of a healthy fleet) and the topology change check."""
    plan = health_source.HealthQueryPlan.for_settings(guard.fleet, topology=False)
    topology = health_source.TopologyPlan().queries()
    return plan.queries() | topology | health_source.TopologyChangesPlan().queries()


class NoPods:
    def pods(self) -> tuple[workloads.WorkloadPod, ...]:
        return ()


@dataclass(frozen=True)
class Figures:
    plan: str
    nodes: int
    queries: int
    series: int
    answer_bytes: int
    seconds: float
    rss_mb: float


def run_step(
    kind: str, url: str, at: datetime, guard: settings_model.GuardSettings
) -> tuple[float, dict[str, int]]:
    """The step as the tick runs it: its seconds, and the stand-in's counters before it (the
    steady minute: after a first run filled the topology cache). BenchError when it finds
    anything."""
    timeout = guard.prometheus.timeout.total_seconds() * 30  # the answers are large
    if kind == "phantom":
        source = gpu_metrics.GpuMetricsSource(url, phantom_plan(guard), timeout_s=timeout)
        started = time.perf_counter()
        decision = phantom_watch.PhantomWatch(source, guard.phantom).run(at)
        seconds = time.perf_counter() - started
        source.close()
        if decision is None or decision.phantoms:
            raise BenchError(f"phantom step on a healthy fleet: {decision}")
        return seconds, {}
    readers: list[prometheus.PrometheusSource] = []

    def read(plan: prometheus.Plan) -> prometheus.PrometheusSource:
        readers.append(prometheus.PrometheusSource(url, plan, timeout_s=timeout))
        return readers[-1]

    plan = health_source.HealthQueryPlan.for_settings(guard.fleet, topology=False)
    watch = fleet_health.FleetHealthWatch(
        NoPods(), read(plan), guard.fleet, topologies=wiring.topology_cache(read, guard.fleet)
    )
    before: dict[str, int] = {}
    if kind == "fleet-health-steady":
        _healthy(watch.run(at))
        before, at = httpx.get(f"{url}/bench/counters").json(), at + watch.every
    started = time.perf_counter()
    health = watch.run(at)
    seconds = time.perf_counter() - started
    for reader in readers:
        reader.close()
    _healthy(health)
    return seconds, before


def _healthy(health: fleet_health.FleetHealth) -> None:
    if health.findings or health.unchecked or health.persistent:
        raise BenchError(f"fleet-health step on a healthy fleet: {health}")


def measure(kind: str, n: int) -> Figures:
    """One plan at one size: the stand-in in one process, the step in this one."""
    guard = settings_model.GuardSettings()
    plan = phantom_plan(guard).queries() if kind == "phantom" else health_plan(guard)
    context = multiprocessing.get_context("fork")
    conn, child = context.Pipe()
    server = context.Process(target=serve, args=(n, plan, child))
    server.start()
    child.close()  # the stand-in's end lives in its process: its exit is our end of file
    try:
        try:
            port = conn.recv()
        except EOFError:
            raise BenchError(f"the stand-in ended with exit code {server.exitcode}") from None
        if isinstance(port, BenchError):
            raise port
        url = f"http://127.0.0.1:{port}"
        seconds, before = run_step(kind, url, datetime.now(UTC), guard)
        after = httpx.get(f"{url}/bench/counters").json()
        counts = {k: v - before.get(k, 0) for k, v in after.items()}
    finally:
        with contextlib.suppress(OSError):  # BrokenPipeError when the stand-in is gone
            conn.send("stop")
        server.join()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return Figures(kind, n, counts["queries"], counts["series"], counts["bytes"], seconds, rss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000",
                        help="node counts, comma-separated (default: 1000,10000)")
    parser.add_argument("--plans", default=",".join(PLANS),
                        help=f"plans, comma-separated (default: {','.join(PLANS)})")
    args = parser.parse_args()
    print(f"plans bench: {GPUS_PER_NODE} GPUs per node, healthy and busy; Prometheus: a "
          "stand-in answering each plan as for a healthy fleet; reader: the tick's step, "
          "default settings", flush=True)
    for n in (int(s) for s in args.sizes.split(",")):
        for kind in args.plans.split(","):
            try:
                f = tick_bench.in_fresh_process(measure, kind, n)
            except BenchError as e:
                raise SystemExit(f"plans bench, {kind} at {n} nodes: {e}") from e
            print(f"plan: name={f.plan} nodes={f.nodes} queries={f.queries} series={f.series} "
                  f"answer_mb={f.answer_bytes / 1e6:.2f} seconds={f.seconds:.3f} "
                  f"rss_mb={f.rss_mb:.0f}", flush=True)


if __name__ == "__main__":
    main()
