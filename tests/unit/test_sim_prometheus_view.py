"""The demo's Prometheus emulation (``sim.prometheus_view``) evaluates subqueries as either
Prometheus major version does, and the guard's hold window reads the same on both: a loss is
held from one hold window after the scrape that first saw it, never a tick earlier on 3.x or
later on 2.x. A scrape is stamped when it reads the world, as Prometheus stamps it."""

from __future__ import annotations

from datetime import datetime, timedelta

from gpuguard.model import metric_names as names
from gpuguard.model import subquery
from gpuguard.sim import clock, prometheus_view, scenario, store, world

HOLD, STEP = timedelta(minutes=10), timedelta(seconds=30)
LOSS = """
name: one-gpu-off-the-bus
fleet: {nodes: [gpu-node-a], gpus_per_node: 8}
events:
  - {at: 5m, xid: {node: gpu-node-a, gpu: 3, xid: 79}}
"""


def steps(at: datetime, range_: timedelta, *, left_open: bool) -> list[datetime]:
    return prometheus_view._subquery_steps(at, range_, STEP, left_open)


def test_on_the_step_grid_a_plain_range_has_one_step_more_on_prometheus_2() -> None:
    at = datetime.fromtimestamp(1_790_000_010 // 30 * 30).astimezone()
    assert len(steps(at, HOLD, left_open=False)) == 21  # [t - 600 s, t]
    assert len(steps(at, HOLD, left_open=True)) == 20  # (t - 600 s, t]


def test_the_guards_range_gives_both_versions_the_steps_of_the_whole_window() -> None:
    origin = datetime.fromtimestamp(1_790_000_010 // 30 * 30).astimezone()
    for second in range(0, 61):  # on the grid and at every whole second between
        at = origin + timedelta(seconds=second)
        two = steps(at, subquery.subquery_range(HOLD), left_open=False)
        three = steps(at, subquery.subquery_range(HOLD), left_open=True)
        assert two == three
        assert min(two) >= at - HOLD
        assert min(two) - STEP < at - HOLD


def held(left_open: bool, found_after: timedelta) -> tuple[datetime, list[datetime]]:
    """The loss scenario scraped every 15 s; its origin and the instants (every 5 s) at which
    its loss reads held."""
    spec = scenario.loads(LOSS)
    the_world = world.World.from_scenario(spec, store.ObjectStore(), clock.SimClock(spec.start))
    view = prometheus_view.WorldPrometheus(the_world, HOLD, timedelta(hours=24),
                                           left_open=left_open)  # fmt: skip
    out: list[datetime] = []

    def scrape(w: world.World) -> None:
        view.scrape(found_after=found_after)
        for offset in range(0, 15, 5):
            at = w.now + timedelta(seconds=offset)
            loss = [s.value for s in view.samples(at) if s.name == names.GPU_LOSS_HELD]
            if loss and loss[0] > 0:
                out.append(at)

    view.scrape(found_after=found_after)
    the_world.run(step=prometheus_view.SCRAPE, until=timedelta(minutes=20), on_step=scrape)
    return the_world.origin, out


def test_a_gpu_loss_reads_held_at_the_same_instants_on_either_version() -> None:
    origin, three = held(True, timedelta(0))
    _, two = held(False, timedelta(0))
    assert three == two
    seen = origin + timedelta(minutes=5)  # the scrape at the fault finds it, on a 30 s step
    assert seen.timestamp() % STEP.total_seconds() == 0
    ticks = [t for t in three if t.timestamp() % STEP.total_seconds() == 0]
    assert ticks[0] == seen + HOLD  # held over [t - 10 min, t] from the step that saw it
    assert three[0] == seen - STEP + HOLD + timedelta(seconds=5)  # the step before drops out


def test_a_scrape_found_one_interval_later_shows_the_loss_one_tick_later() -> None:
    _, now = held(True, timedelta(0))
    _, later = held(True, prometheus_view.SCRAPE)
    ticks = [[t for t in found if t.timestamp() % STEP.total_seconds() == 0]
             for found in (now, later)]  # fmt: skip
    assert ticks[1][0] - ticks[0][0] == STEP  # scraped at 5m15s: the 5m step still without it
