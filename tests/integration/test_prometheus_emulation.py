"""The demo's Prometheus emulation (``sim.prometheus_view.WorldPrometheus``) held to a real
Prometheus: the guard's query plan (``sources.prometheus.QueryPlan`` through
``PrometheusSource``) and the phantom plan (``sources.gpu_metrics.GpuQueryPlan`` through
``GpuMetricsSource``) must read the same samples from both.

Each scenario is played once, every 15 s, into the emulation and into a history recorder that
takes the scrape a real Prometheus would have taken (dcgm-exporter, kube-state-metrics and,
where nodes run it, gpuguard's agent — the demo's ``NodeAgents``); while the scenario's
Prometheus is down nothing is recorded. All scenarios go into ONE history, each 26 h after the
one before (beyond the 24 h lookback, so none reads another), remote-written with the
staleness markers a scraping Prometheus writes (``tests.integration.remote_write``) into one
Debian Prometheus (2.42), and again into one Prometheus 3.x (the control-plane build's,
``scripts/control-plane build``: what a guard on a current Prometheus reads; of its changed
defaults, left-open range selectors matter here — ``test_the_plans_ranges_answer_alike...``
— while UTF-8 names and the ``le``/``quantile`` normalisation of scraped classic histograms
meet no query of the plans). Both then answer at sampled instants: every 30 s tick around
each event (its first 3 minutes and the hold window's end), every 5 minutes between, and 13 s
after every fourth of those ticks (off the step grid). Answers are compared per series — or
both refuse (fail closed). An instant inside an outage is one the real server could not have
answered: there the emulation must refuse.

The zero-gauge case has an exporter that answers 0 for a GPU without an Xid and a short Xid
lookback, so the plan's ``> 0`` filters (today, a lookback ago) and its pods query meet zeros.

Both are fed the same scrapes, stamped when they read the world, so they must agree exactly.
The hold window's subquery has the range ``model.subquery`` gives it, whose steps are the same
on Prometheus 2.x (a step at exactly ``t - range`` is in) and 3.x (it is out), both tested
here; ``tests/unit/test_sim_prometheus_view.py`` holds the emulation to both semantics.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from gpuguard.catalog import gpu_models
from gpuguard.demo import agents, findings
from gpuguard.errors import SourceError
from gpuguard.model import fleet, series, subquery
from gpuguard.model import metric_names as names
from gpuguard.model import settings as settings_model
from gpuguard.policy import interconnect, phantom
from gpuguard.sim import clock, exposition, history, prometheus_view, scenario, store, world
from gpuguard.sources import fleet_health, gpu_metrics, gpu_pods
from gpuguard.sources import prometheus as source
from tests.integration import prometheus, remote_write

pytestmark = pytest.mark.integration

HOLD, LOOKBACK = timedelta(minutes=10), timedelta(hours=24)
SETTLE_TRIES, SETTLE_S = 3, 1.0  # a real answer that differs is asked again (``settled``)
SCRAPE, TICK = timedelta(seconds=15), timedelta(seconds=30)
APART = timedelta(hours=26)
PHANTOM = settings_model.GuardSettings().phantom
GPU_PLAN = gpu_metrics.GpuQueryPlan(window=PHANTOM.hold)
GUARD_GPU_PLAN = gpu_metrics.GpuQueryPlan.for_settings(PHANTOM)  # scoped to candidate nodes
AGENT_TARGET = {"job": "gpuguard-agent"}
# The phantom plan reads every GPU series at the instant and a window earlier (``offset``), so
# it is compared once the scenario's start is a window behind. The history carries staleness
# markers, so a series that vanished (a GPU's series without a pod, once its pod is mapped) is
# not read on (backfilled by promtool, without markers, it lingered 5 more minutes).

XID_COUNT = """
name: xid-count-metric
xid_count_metric: true
duration: 15m
fleet: {nodes: [gpu-node-a, gpu-node-b], gpus_per_node: 4}
events:
  - {at: 2m, xid: {node: gpu-node-a, gpu: 1, xid: 13}}
  - {at: 4m, xid: {node: gpu-node-a, gpu: 1, xid: 13}}
  - {at: 5m, xid: {node: gpu-node-b, gpu: 2, xid: 79}}
"""
OUTAGE = """
name: prometheus-outage
duration: 20m
fleet: {nodes: [gpu-node-a, gpu-node-b], gpus_per_node: 4}
events:
  - {at: 3m, xid: {node: gpu-node-b, gpu: 3, xid: 48}}
  - {at: 3m, gpu_lost: {node: gpu-node-b, gpu: 3}}
  - {at: 6m, prometheus_down: {duration: 4m}}
  - {at: 8m, xid: {node: gpu-node-a, gpu: 0, xid: 79}}
"""
PHANTOM_NODES = """
name: phantom-on-a-node-without-gpu-pods
duration: 40m
fleet: {nodes: [gpu-node-1, gpu-node-2, gpu-node-3], gpus_per_node: 4,
        model: NVIDIA H100 80GB HBM3}
events:
  - {at: 0s, phantom: {node: gpu-node-1, gpu: 1}}
  - {at: 0s, workload: {node: gpu-node-1, gpus: [3], profile: training, name: train}}
  - {at: 0s, phantom: {node: gpu-node-2, gpu: 0}}
  - {at: 0s, workload: {node: gpu-node-3, gpus: [0, 1], profile: training, name: busy,
                        duration: 20m}}
"""
ZERO_GAUGE = """
name: xid-gauge-zero
xid_gauge_zero: true
duration: 20m
fleet: {nodes: [gpu-node-a, gpu-node-b], gpus_per_node: 4}
events:
  - {at: 0s, workload: {node: gpu-node-a, gpus: [0, 1], profile: training, name: train}}
  - {at: 2m, xid: {node: gpu-node-a, gpu: 2, xid: 13}}
  - {at: 6m, xid: {node: gpu-node-b, gpu: 1, xid: 48}}
  - {at: 6m, gpu_lost: {node: gpu-node-b, gpu: 1}}
"""
FLEET_HEALTH = """
name: fleet-health-plan
duration: 25m
fleet: {nodes: [gpu-node-1, gpu-node-2], gpus_per_node: 4, model: NVIDIA H100 80GB HBM3}
events:
  - {at: 0s, workload: {node: gpu-node-1, gpus: [0, 1], profile: training, name: train}}
  - {at: 2m, throttle: {node: gpu-node-1, gpu: 2, reason: hw-thermal, duration: 4h}}
  - {at: 2m, throttle: {node: gpu-node-2, gpu: 0, reason: sw-power-cap, duration: 4h}}
  - {at: 3m, nvlink_errors: {node: gpu-node-1, gpu: 1, rate: 12, duration: 4h, counter: crc_flit}}
  - {at: 3m, nvlink_errors: {node: gpu-node-2, gpu: 3, rate: 0.1, duration: 4h, counter: replay}}
  - {at: 4m, ib_flap: {node: gpu-node-2, port: mlx5_1/1, count: 8, every: 2m}}
"""
HEALTH_PLAN = fleet_health.HealthQueryPlan.for_settings(settings_model.FleetHealthSettings())
SHORT_LOOKBACK = timedelta(minutes=5)
"""The zero-gauge case's Xid lookback: its ``offset`` reads zeros and Xids inside the span."""
CASES = [  # (id, scenario: shipped name or text, played span, compare the phantom plan)
    ("xid79-fast-path", "xid79-twice", timedelta(minutes=20), False),
    ("dbe-through-the-hold-window", "ecc-dbe-five", timedelta(minutes=45), False),
    ("user-xids", "user-xid-storm", timedelta(minutes=30), False),
    ("allocatable-dips", "driver-upgrade-dip", timedelta(minutes=25), False),
    ("xid-count-metric", XID_COUNT, timedelta(minutes=20), False),
    ("agent-counters", "agent-guards-silent-exporter", timedelta(minutes=30), False),
    ("prometheus-outage", OUTAGE, timedelta(minutes=20), False),
    ("phantom-plan", PHANTOM_NODES, timedelta(minutes=40), True),
    ("xid-gauge-zero", ZERO_GAUGE, timedelta(minutes=20), False),
    ("fleet-health-plan", FLEET_HEALTH, timedelta(minutes=25), False),
]
HEALTH_CASES = {"fleet-health-plan"}  # the fleet-health plan is compared in these
LOOKBACKS = {"xid-gauge-zero": SHORT_LOOKBACK}

Answer = list[tuple[tuple[str, ...], float]] | str


@dataclass
class Played:
    """One scenario as the emulation saw it, and when its Prometheus was down."""

    name: str
    origin: datetime
    until: timedelta
    view: prometheus_view.WorldPrometheus
    events: tuple[timedelta, ...]
    phantom: bool
    down: list[tuple[datetime, datetime]] = field(default_factory=list)

    def instants(self) -> Iterator[datetime]:
        """Every tick within 3 min of an event and around the hold window's end after it,
        every 5 min between, and 13 s after every fourth of those (off the grid)."""
        near = {
            self.origin + at + offset
            for at in self.events
            for start, span in ((timedelta(0), timedelta(minutes=3)),
                                (HOLD - timedelta(minutes=1), timedelta(minutes=2)))
            for offset in _ticks(start, span)
        }  # fmt: skip
        regular = {self.origin + at for at in _ticks(TICK, self.until, every=timedelta(minutes=5))}
        ticks = sorted(t for t in near | regular if self.origin < t <= self.origin + self.until)
        yield from sorted(ticks + [t + timedelta(seconds=13) for t in ticks[::4]])

    def down_at(self, at: datetime) -> bool:
        return any(start <= at < end for start, end in self.down)


def _ticks(start: timedelta, span: timedelta, every: timedelta = TICK) -> list[timedelta]:
    first = (start // TICK) * TICK
    return [first + every * i for i in range(int(span / every) + 1)]


def key(s: fleet.MetricSample) -> tuple[str, ...]:
    """A sample by name and what tells its series apart (not the scrape's job/instance; an
    InfiniBand port's node is its ``instance`` without the port, as ``interconnect`` reads)."""
    labels = s.labels
    return (s.name, interconnect.node_of(labels) or "", series.gpu_of(labels) or "",
            labels.get("xid", ""), labels.get("pci", ""), gpu_metrics.pod_of(labels) or "",
            *(labels.get(k, "") for k in ("reason", "counter", "device", "port")))


def answer(read: object) -> Answer:
    """The samples sorted by key; ``"refused"`` when the reader fails closed."""
    try:
        samples = read() if callable(read) else ()
    except SourceError:
        return "refused"
    return sorted((key(s), s.value) for s in samples)


def asked(read: Callable[[], tuple[fleet.MetricSample, ...]]) -> tuple[Answer, str]:
    """The real server's answer, asked once more when it refuses: right after the history is
    written, Prometheus compacts its head in the background, and under load one query in a
    thousand fails then and answers when asked again (the guard's next tick would). The data
    did not change, so the second answer is the server's. With why it refused first."""
    try:
        samples = read()
    except SourceError as e:
        return answer(read), f"refused first: {e}"
    return sorted((key(s), s.value) for s in samples), ""


def settled(
    emulated: Answer, read: Callable[[], tuple[fleet.MetricSample, ...]]
) -> tuple[Answer, str]:
    """The real server's answer; asked again (up to ``SETTLE_TRIES`` times, ``SETTLE_S``
    apart) while it differs from ``emulated``. Prometheus 2.42 compacts the out-of-order head
    the remote-written history sits in, in the background; a query during that compaction can
    miss some of a series' samples and answers in full a moment later (seen here about once
    in three runs on a loaded machine). The data did not change, so a difference that stays
    is a divergence; one that goes was the server's compaction. With what was seen first."""
    answered, why = asked(read)
    first = ""
    for _ in range(SETTLE_TRIES):
        if same(emulated, answered):
            break
        first = first or f"differed first: {differ(emulated, answered)!r:.300}"
        time.sleep(SETTLE_S)
        answered, why = asked(read)
    return answered, "; ".join(w for w in (why, first) if w)


def same(emulated: Answer, answered: Answer) -> bool:
    """The same series with the same values, up to float rounding (an average summed in
    another order differs in its last bits)."""
    if isinstance(emulated, str) or isinstance(answered, str):
        return emulated == answered
    return [k for k, _ in emulated] == [k for k, _ in answered] and all(
        math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
        for (_, a), (_, b) in zip(emulated, answered, strict=True)
    )


def differ(emulated: Answer, answered: Answer) -> tuple[object, object]:
    """What only the emulation and only Prometheus answered."""
    if isinstance(emulated, str) or isinstance(answered, str):
        return emulated, answered
    return sorted(set(emulated) - set(answered)), sorted(set(answered) - set(emulated))


def play(
    case: tuple[str, str, timedelta, bool], origin: datetime, recorder: history.HistoryRecorder,
    hosts: Path,
) -> Played:
    name, text, until, phantom = case
    spec = scenario.load_shipped(text) if "\n" not in text else scenario.loads(text)
    the_world = world.World.from_scenario(
        spec, store.ObjectStore(), clock.SimClock(origin), hosts_root=hosts / name
    )
    view = prometheus_view.WorldPrometheus(the_world, HOLD, LOOKBACKS.get(name, LOOKBACK))
    node_agents = agents.NodeAgents(the_world, hosts / name, hosts / f"{name}-state")
    scraped: list[tuple[str, dict[str, str], float]] = []

    def agent_target() -> Iterator[tuple[str, dict[str, str], float]]:
        scraped[:] = [(n, dict(labels), v) for n, labels, v in node_agents.scrape()]
        return iter(scraped)

    view.targets.append(agent_target)
    played = Played(name, origin, until, view, tuple(e.at for e in spec.events), phantom)

    def scrape(w: world.World) -> None:
        view.scrape()  # scrapes the agents too (agent_target)
        if not w.prometheus_up:  # a Prometheus that is down records nothing
            played.down.append((w.now, w.now + SCRAPE))
            return
        recorder.sample(w.nodes, w.store, w.now)
        for node in sorted({labels["node"] for _, labels, _ in scraped}):
            families = [
                exposition.Family(metric, "counter", "", tuple(
                    exposition.Sample(tuple(sorted(labels.items())), value)
                    for n, labels, value in scraped if n == metric and labels["node"] == node
                ))
                for metric in sorted({n for n, _, _ in scraped})
            ]  # fmt: skip
            recorder.add(families, AGENT_TARGET | {"instance": node}, w.now, up=True)

    try:
        scrape(the_world)
        the_world.run(step=SCRAPE, until=until, on_step=scrape)
    finally:
        node_agents.close()
    return played


@pytest.fixture(scope="module", params=prometheus.VERSIONS)
def fed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[list[Played], str]]:
    """Every case played into one history, remote-written into one Prometheus of each
    version (its URL): Debian's 2.42 and the control-plane build's 3.x."""
    version: str = request.param
    prometheus.binary(version)  # skip (or fail under CI) before playing every case
    tmp = tmp_path_factory.mktemp("emulation")
    now = datetime.now(UTC).replace(microsecond=0)
    base = now - timedelta(days=2) - APART * len(CASES)
    base -= timedelta(seconds=base.timestamp() % TICK.total_seconds())
    recorder = history.HistoryRecorder(fleet_health=True)
    plays = [play(case, base + APART * i, recorder, tmp / "hosts") for i, case in enumerate(CASES)]
    with remote_write.served(recorder, tmp, version=version) as prom:
        built = prom.api("status/buildinfo")["version"]
        assert built.startswith("3." if version == prometheus.V3 else "2.42."), built
        yield plays, prom.url


@pytest.mark.parametrize("index", range(len(CASES)), ids=[case[0] for case in CASES])
def test_the_emulation_answers_the_guards_queries_as_prometheus_does(
    fed: tuple[list[Played], str], index: int
) -> None:
    plays, url = fed
    played = plays[index]
    # A generous timeout: the suite shares a loaded machine, and a slow answer is no divergence.
    real = source.PrometheusSource(url, source.QueryPlan(HOLD, played.view.xid_lookback),
                                   timeout_s=60)
    gpus = gpu_metrics.GpuMetricsSource(url, GPU_PLAN)
    health = source.PrometheusSource(url, HEALTH_PLAN, timeout_s=60)
    guards = gpu_metrics.GpuMetricsSource(url, GUARD_GPU_PLAN)
    pods = gpu_pods.source(real)
    nodes = [node.name for node in played.view.world.nodes]
    divergences, compared = [], 0
    for at in played.instants():
        emulated = answer(lambda at=at: played.view.samples(at))
        if played.down_at(at):
            assert emulated == "refused", at - played.origin
            continue
        answered, why = settled(emulated, lambda at=at: real.samples(at))
        compared += 1
        if not same(emulated, answered):
            divergences.append((at - played.origin, "plan", *differ(emulated, answered), why))
        emulated = answer(lambda at=at: played.view.samples_of(at, nodes))
        answered, why = settled(emulated, lambda at=at: pods.samples_of(at, nodes))
        if not same(emulated, answered):
            divergences.append((at - played.origin, "pods", *differ(emulated, answered), why))
        if played.phantom and at - played.origin > GPU_PLAN.window:
            for plan, reader in ((GPU_PLAN, gpus), (GUARD_GPU_PLAN, guards)):
                emulated = answer(lambda at=at, plan=plan: window_samples(played.view, at, plan))
                answered, why = settled(emulated, lambda at=at, r=reader: r.samples(at))
                if not same(emulated, answered):
                    divergences.append((at - played.origin, f"phantom (scoped: {plan.scoped})",
                                        *differ(emulated, answered), why))  # fmt: skip
        if played.name in HEALTH_CASES:
            emulated = answer(lambda at=at: health_samples(played, at))
            answered, why = settled(emulated, lambda at=at: health.samples(at))
            if not same(emulated, answered):
                divergences.append(
                    (at - played.origin, "fleet health", *differ(emulated, answered), why)
                )
    real.close()
    gpus.close()
    guards.close()
    health.close()
    assert compared >= played.until / timedelta(minutes=5)
    assert divergences == [], "\n".join(map(repr, divergences))


def health_samples(played: Played, at: datetime) -> tuple[fleet.MetricSample, ...]:
    """The emulation's answer to the guard's fleet-health plan (``sim.fleet_view``)."""
    return findings.plan_samples(played.view.world, at, HEALTH_PLAN)


def window_samples(
    view: prometheus_view.WorldPrometheus, at: datetime, plan: gpu_metrics.GpuQueryPlan
) -> tuple[fleet.MetricSample, ...]:
    """The emulation's answer to a phantom plan."""
    return findings.gpu_plan_samples(view, at, plan)


def test_a_phantom_on_a_node_without_gpu_pods_is_found_through_prometheus(
    fed: tuple[list[Played], str],
) -> None:
    """kube-state-metrics has no pod series for gpu-node-2: the plan's explicit zero per node
    makes its GPU pods 0, not unknown, so its phantom is reported like gpu-node-1's."""
    plays, url = fed
    (played,) = [p for p in plays if p.phantom]
    at = played.origin + played.until
    with gpu_metrics.GpuMetricsSource(url, GPU_PLAN) as gpus:
        readings = gpus.readings(at)
    found = phantom.decide(readings.windows, PHANTOM, gpu_models.load_table(), at).phantoms
    assert sorted((p.node, p.gpu) for p in found) == [("gpu-node-1", "1"), ("gpu-node-2", "0")]
    pods = {w.node: w.node_gpu_pods for w in readings.windows}
    assert pods["gpu-node-2"] == 0


def test_zero_gauges_are_not_answered_but_the_pods_on_those_gpus_are(
    fed: tuple[list[Played], str],
) -> None:
    """The exporter has a series for each of the 8 GPUs; the plan's answer holds only the user
    Xid (13 on gpu-node-a GPU 2), and the GPU-pods query of that node the training pod on GPUs 0
    and 1 (their Xid is 0)."""
    plays, url = fed
    (played,) = [p for p in plays if p.name == "xid-gauge-zero"]
    at = played.origin + timedelta(minutes=5)
    with httpx.Client() as client:
        raw = client.get(f"{url}/api/v1/query", params={
            "query": f"count({names.DCGM_XID_LAST})", "time": at.timestamp()}).json()
    assert raw["data"]["result"][0]["value"][1] == "8"
    real = source.PrometheusSource(url, source.QueryPlan(HOLD, played.view.xid_lookback))
    try:
        answer = real.samples(at) + gpu_pods.source(real).samples_of(at, ["gpu-node-a"])
    finally:
        real.close()
    gauge = [(series.node_of(s.labels), s.labels["gpu"], s.value) for s in answer
             if s.name == names.DCGM_XID_LAST]
    pods = sorted((s.labels["gpu"], s.labels["pod"]) for s in answer
                  if s.name == names.DCGM_GPU_PODS)
    assert gauge == [("gpu-node-a", "2", 13.0)]
    assert [gpu for gpu, _ in pods] == ["0", "1"]
    assert len({pod for _, pod in pods}) == 1


def test_the_plans_ranges_answer_alike_where_a_plain_range_does_not(
    fed: tuple[list[Played], str],
) -> None:
    """Prometheus 3 made range selectors left-open: at a scrape instant ``t``, ``x[10m]``
    holds the sample at exactly ``t - 10m`` on 2.x and not on 3.x (41 scrapes every 15 s, or
    40). The guard's ranges (``model.subquery.promql_range``: half a second longer) hold it on
    both, which is why the emulation answers both versions alike."""
    plays, url = fed
    at = (plays[0].origin + timedelta(minutes=15)).timestamp()
    with httpx.Client(base_url=url) as client:
        version = client.get("/api/v1/status/buildinfo").json()["data"]["version"]

        def scrapes(window: str) -> float:
            answer = client.get("/api/v1/query", params={
                "query": f"max(count_over_time({history.UP}[{window}]))", "time": at}).json()
            return float(answer["data"]["result"][0]["value"][1])

        plain, guards = scrapes("10m"), scrapes(subquery.promql_range(timedelta(minutes=10)))
    assert (plain, guards) == ((40.0 if version.startswith("3.") else 41.0), 41.0), version
