"""The demo's Prometheus emulation (``sim.prometheus_view.WorldPrometheus``) held to a real
Prometheus: the guard's query plan (``sources.prometheus.QueryPlan`` through
``PrometheusSource``) must read the same samples from both.

Each scenario is played once; every 15 s the emulation scrapes the world and the history
recorder takes the scrape a real Prometheus would have taken, which is backfilled into Debian's
Prometheus (2.42). At every 30 s tick instant of the played span both answer the plan, compared
per series (query name, node, GPU, Xid) — or both refuse (fail closed).

Both are fed the same scrapes, stamped when they read the world, so they must agree exactly
at every instant. The hold window's subquery has the range ``model.subquery`` gives it, whose
steps are the same on Prometheus 2.x (tested here: a step at exactly ``t - range`` is in) and
3.x (it is out); ``tests/unit/test_sim_prometheus_view.py`` holds the emulation to both.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpuguard.errors import SourceError
from gpuguard.model import metric_names as mn
from gpuguard.model import series
from gpuguard.sim import clock, history, prometheus_view, scenario, store, world
from gpuguard.sources import prometheus as source
from tests.integration import prometheus

pytestmark = pytest.mark.integration

HOLD, LOOKBACK = timedelta(minutes=10), timedelta(hours=24)
SCRAPE, TICK = timedelta(seconds=15), timedelta(seconds=30)
COMPARED = frozenset({mn.DCGM_XID_LAST, mn.XID_LAST_24H_AGO, mn.XID_COUNT_RECENT, mn.GPU_LOSS_HELD})
Answer = dict[tuple[str, str | None, str, str], float] | str


def answer(
    reader: prometheus_view.WorldPrometheus | source.PrometheusSource, at: datetime
) -> Answer:
    """The compared samples by (name, node, GPU, Xid); ``"refused"`` when it fails closed."""
    try:
        samples = reader.samples(at)
    except SourceError:
        return "refused"
    return {
        (
            s.name,
            series.node_of(s.labels),
            series.gpu_of(s.labels),
            s.labels.get("xid", ""),
        ): s.value
        for s in samples
        if s.name in COMPARED
    }


def played(
    name: str, until: timedelta, out: Path
) -> tuple[datetime, prometheus_view.WorldPrometheus]:
    """The scenario played from two days ago (on the tick grid) into the emulation and into
    an OpenMetrics history at ``out``."""
    now = datetime.now(UTC).replace(microsecond=0)
    origin = now - timedelta(days=2)
    origin -= timedelta(seconds=origin.timestamp() % TICK.total_seconds())
    spec = scenario.load_shipped(name)
    the_world = world.World.from_scenario(spec, store.ObjectStore(), clock.SimClock(origin))
    view = prometheus_view.WorldPrometheus(the_world, HOLD, LOOKBACK)
    recorder = history.HistoryRecorder()

    def scrape(w: world.World) -> None:
        view.scrape()
        recorder.sample(w.nodes, w.store, w.clock.now())

    view.scrape()
    the_world.run(step=SCRAPE, until=until, on_step=scrape)
    recorder.write_openmetrics(out)
    return origin, view


@pytest.mark.parametrize(
    ("name", "until"),
    [
        pytest.param("xid79-twice", timedelta(minutes=20), id="xid79-fast-path"),
        pytest.param("ecc-dbe-five", timedelta(minutes=60), id="dbe-through-the-hold-window"),
        pytest.param("user-xid-storm", timedelta(minutes=40), id="user-xids"),
        pytest.param("driver-upgrade-dip", timedelta(minutes=30), id="allocatable-dips"),
        pytest.param("mig-reconfig", timedelta(minutes=30), id="mig-dips"),
    ],
)
def test_the_emulation_answers_the_guards_queries_as_prometheus_does(
    name: str, until: timedelta, tmp_path: Path
) -> None:
    origin, view = played(name, until, tmp_path / f"{name}.om")
    divergences, compared = [], 0
    with prometheus.from_openmetrics(tmp_path / f"{name}.om", tmp_path) as prom:
        real = source.PrometheusSource(prom.url, source.QueryPlan(HOLD, LOOKBACK))
        at = origin + TICK
        while at <= origin + until:
            emulated, answered = answer(view, at), answer(real, at)
            compared += 1
            if emulated != answered:
                divergences.append((at - origin, emulated, answered))
            at += TICK
        real.close()
    assert compared == until // TICK  # every tick instant of the played span
    assert divergences == []
