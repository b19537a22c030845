"""The loop ticks only while leading, on its interval, backs off after errors, and
releases the Lease when stopped."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from gpuguard.controller import runner, telemetry, tick
from gpuguard.errors import SourceError
from gpuguard.model import decisions, fleet, node_conditions, settings
from gpuguard.model import metric_names as names
from tests import fakes
from tests import prometheus_answers as test_sources_prometheus

XID_QUERY = test_sources_prometheus.PLAN.queries()[names.DCGM_XID_LAST]
NOW = datetime(2026, 9, 21, tzinfo=UTC)


class FakeLease:
    def __init__(self, leading: bool = True) -> None:
        self.leading = leading
        self.released = False

    def try_acquire_or_renew(self) -> bool:
        return self.leading

    def is_leader(self) -> bool:
        return self.leading

    def release(self) -> None:
        self.released = True


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class AlwaysHardware:
    def is_hardware(self, code: int) -> bool:
        return True


def make(
    lease: FakeLease, metrics_source: fakes.FakeMetrics
) -> tuple[runner.Runner, Clock]:
    guard = tick.Guard(
        metrics=metrics_source,
        cluster=fakes.FakeCluster(),
        writer=fakes.FakeWriter(),
        classifier=AlwaysHardware(),
        settings=settings.GuardSettings(),
        clock=fakes.FakeClock(NOW),
    )
    clock = Clock()
    loop = runner.Runner(
        guard, lease, telemetry.GuardMetrics(), interval=timedelta(seconds=30), monotonic=clock
    )
    return loop, clock


def test_standby_never_ticks() -> None:
    source = fakes.FakeMetrics()
    loop, _ = make(FakeLease(leading=False), source)
    assert loop.step() is None
    assert source.asked_at == []
    assert loop.healthy()


def test_leader_ticks_once_per_interval() -> None:
    source = fakes.FakeMetrics()
    loop, clock = make(FakeLease(), source)
    assert loop.step() is not None
    clock.t += 10
    assert loop.step() is None
    clock.t += 20
    assert loop.step() is not None
    assert len(source.asked_at) == 2
    assert loop.healthy()


def test_failed_ticks_back_off_and_turn_unready_but_stay_alive() -> None:
    loop, clock = make(FakeLease(), fakes.FakeMetrics(error=SourceError("down")))
    loop.step()
    clock.t += 30
    assert loop.step() is None  # waits 60 s after one failure
    clock.t += 30
    assert loop.step() is not None
    assert not loop.ready()  # Prometheus is down: readiness says so
    assert loop.healthy()  # the loop runs: Kubernetes must not restart it for that


@pytest.mark.parametrize(
    ("failures", "seconds"), [(0, 30), (1, 60), (2, 120), (3, 240), (9, 300)]
)
def test_backoff_doubles_and_is_capped(failures: int, seconds: float) -> None:
    assert runner.backoff(timedelta(seconds=30), failures) == seconds


def test_stop_releases_the_lease() -> None:
    lease = FakeLease()
    loop, _ = make(lease, fakes.FakeMetrics())
    stop = threading.Event()
    stop.set()
    loop.run(stop)
    assert lease.released


def test_an_unhandled_step_error_fails_the_tick_closed_not_the_loop() -> None:
    from gpuguard.errors import GpuguardError

    loop, _ = make(FakeLease(), fakes.FakeMetrics())

    def explode() -> tick.TickResult:
        raise GpuguardError("jobs forbidden")

    loop.guard.tick = explode  # type: ignore[method-assign]
    result = loop.step()
    assert result is not None
    assert result.error_kind == "internal"
    assert not loop.ready()


def test_any_exception_in_a_tick_fails_it_closed_and_the_loop_ticks_again() -> None:
    loop, clock = make(FakeLease(), fakes.FakeMetrics())
    calls = []

    def explode(**_: object) -> tick.TickResult:
        calls.append(1)
        raise ValueError("invalid literal for int() with base 10: '²'")

    loop.guard.tick = explode  # type: ignore[method-assign]
    first = loop.step()
    clock.t += 3600
    second = loop.step()
    assert first is not None
    assert second is not None
    assert first.error_kind == "internal"
    assert first.error is not None
    assert "ValueError" in first.error
    assert len(calls) == 2


def test_a_loop_stuck_in_a_tick_is_not_alive() -> None:
    loop, clock = make(FakeLease(), fakes.FakeMetrics())
    assert loop.step() is not None
    assert loop.healthy()
    assert loop.ready()

    def hang() -> tick.TickResult:
        clock.t += 3 * 30  # an HTTP call without an answer
        assert not loop.healthy()  # probed while the tick is stuck
        raise SourceError("gave up")

    clock.t += 30
    loop.guard.tick = hang  # type: ignore[method-assign]
    loop.step()
    assert loop.healthy()  # it came back


def test_a_standby_is_ready_while_the_api_answers() -> None:
    lease = FakeLease(leading=False)
    loop, _ = make(lease, fakes.FakeMetrics())
    assert not loop.ready()  # no Lease attempt yet
    loop.step()
    assert loop.ready()


def test_a_standby_is_unready_while_prometheus_cannot_answer_and_ready_again_after() -> None:
    """It could not decide if it took over: its /readyz says so, looked at once per
    interval, not on every Lease retry."""
    down = {"now": True, "looks": 0}

    def probe() -> None:
        down["looks"] += 1
        if down["now"]:
            raise SourceError("Prometheus query 'freshness' failed: connection refused")

    loop, clock = make(FakeLease(leading=False), fakes.FakeMetrics())
    loop.probe = probe
    loop.step()
    assert not loop.ready()
    down["now"] = False
    clock.t += 2  # a Lease retry, within the interval: no new look
    loop.step()
    assert (loop.ready(), down["looks"]) == (False, 1)
    clock.t += loop.interval.total_seconds()
    loop.step()
    assert (loop.ready(), down["looks"]) == (True, 2)


def test_a_nan_from_prometheus_fails_one_tick_closed_and_the_next_tick_decides() -> None:
    nan = {"first": True}
    good = test_sources_prometheus.fleet_answers(1)

    def answer(request: httpx.Request) -> httpx.Response:
        if nan["first"] and request.url.params["query"] == XID_QUERY:
            nan["first"] = False
            body = {"metric": {"Hostname": "n0", "gpu": "4"}, "value": [1e9, "NaN"]}
            return httpx.Response(200, content=test_sources_prometheus.vector([body]))
        return good(request)

    source = test_sources_prometheus.source(answer)
    loop, clock = make(FakeLease(), fakes.FakeMetrics())
    loop.guard.metrics = source
    loop.guard.clock = fakes.FakeClock(test_sources_prometheus.AT)
    first = loop.step()
    clock.t += 3600
    second = loop.step()
    assert first is not None
    assert second is not None
    assert first.error_kind == "source"
    assert first.error is not None
    assert "not a finite number" in first.error
    assert second.ok


def test_wakes_tick_at_once_and_wakes_before_a_tick_are_that_one_tick() -> None:
    source = fakes.FakeMetrics()
    loop, _ = make(FakeLease(), source)
    loop.step()  # the regular tick; the next is 30 s away
    assert loop.step() is None
    loop.wake("gpu-1", "GpuFallenOffBus/GpuGoneFromBus")
    loop.wake("gpu-2", "GpuFallenOffBus/GpuGoneFromBus")
    assert loop.step() is not None
    assert loop.step() is None  # both wakes were that tick
    registry = loop.metrics.registry
    assert registry.get_sample_value("gpuguard_urgent_wakes_total") == 2
    assert registry.get_sample_value("gpuguard_urgent_ticks_total") == 1
    assert len(source.asked_at) == 2


def test_a_standby_does_not_tick_for_a_wake() -> None:
    source = fakes.FakeMetrics()
    loop, _ = make(FakeLease(leading=False), source)
    loop.wake("gpu-1", "GpuFallenOffBus/GpuGoneFromBus")
    assert loop.step() is None
    assert source.asked_at == []


def test_a_wake_ends_the_loops_wait() -> None:
    loop, _ = make(FakeLease(), fakes.FakeMetrics())
    loop.retry = timedelta(hours=1)  # without the wake, the loop would wait an hour
    stop = threading.Event()
    ticked = threading.Event()
    tick_once = loop.guard.tick

    asked: list[bool] = []

    def tick_and_stop(
        *, urgent: bool = False, woken: Callable[[], bool] | None = None
    ) -> tick.TickResult:
        asked.append(urgent)
        result = tick_once(urgent=urgent, woken=woken)
        if loop.metrics.registry.get_sample_value("gpuguard_urgent_wakes_total"):
            stop.set()  # as on SIGTERM (cli/run.py): stop, and end the wait
            loop.interrupt()
            ticked.set()
        return result

    loop.guard.tick = tick_and_stop  # type: ignore[method-assign]
    thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    thread.start()
    loop.wake("gpu-1", "GpuFallenOffBus/GpuGoneFromBus")
    assert ticked.wait(60)
    thread.join(60)
    assert not thread.is_alive()
    assert asked[-1] is True  # the woken tick says so: a due phantom check waits for later


def gone_from_bus(name: str) -> dict[str, node_conditions.GpuCondition]:
    gpu = node_conditions.GpuNamed("4", "0000:99:00.0", f"GPU-{name}", 79)
    text = node_conditions.message((gpu,), "the kernel said the GPU fell off the bus")
    condition = node_conditions.GpuCondition(
        node_conditions.GPU_FALLEN_OFF_BUS, "True", node_conditions.GONE_FROM_BUS, text, NOW
    )
    return {condition.type: condition}


def fleet_of_two_fallen(**isolation: object) -> tuple[runner.Runner, fakes.FakeNodes]:
    """Ten GPU nodes, one isolation per tick, node isolation (the GPU-or-node rule is tested
    elsewhere); after the regular tick, two nodes' GPUs fall off the bus at one instant."""
    nodes = [fleet.Node(f"gpu-node-{c}", f"boot-{c}", 8, 8) for c in "abcdefghij"]
    api = fakes.FakeNodes({n.name: n for n in nodes})
    cluster = fakes.NodesCluster(api)
    guard = tick.Guard(
        metrics=fakes.FakeMetrics(),
        cluster=cluster,
        writer=cluster,
        classifier=AlwaysHardware(),
        settings=settings.GuardSettings.model_validate(
            {
                "gpu_isolation": {"enabled": False},
                "isolation": {"max_isolations_per_tick": 1, **isolation},
            }
        ),
        clock=fakes.FakeClock(NOW),
    )
    loop = runner.Runner(
        guard, FakeLease(), telemetry.GuardMetrics(), interval=timedelta(hours=1),
        monotonic=Clock(),
    )  # fmt: skip
    assert loop.step() is not None  # the regular tick; the next is an hour away
    for name in ("gpu-node-a", "gpu-node-b"):
        api.update(name, gpu_conditions=gone_from_bus(name))
        loop.wake(name, "GpuFallenOffBus/GpuGoneFromBus")
    return loop, api


def cordoned(api: fakes.FakeNodes) -> list[str]:
    return sorted(n.name for n in api.nodes.values() if n.unschedulable)


def test_simultaneous_gpu_losses_are_cordoned_one_tick_after_another() -> None:
    loop, api = fleet_of_two_fallen()
    first = loop.step()
    assert first is not None
    assert [a.node for a in first.applied] == ["gpu-node-a"]
    assert first.tick_again == ("gpu-node-b",)
    second = loop.step()  # at once: no wake, the interval an hour away
    assert second is not None
    assert [a.node for a in second.applied] == ["gpu-node-b"]
    assert second.tick_again == ()
    assert loop.step() is None  # nothing left: no third tick
    assert cordoned(api) == ["gpu-node-a", "gpu-node-b"]
    registry = loop.metrics.registry
    assert registry.get_sample_value("gpuguard_urgent_rewakes_total") == 1
    assert registry.get_sample_value("gpuguard_urgent_ticks_total") == 2


def test_the_breakers_level_still_withholds_and_asks_no_further_tick() -> None:
    loop, api = fleet_of_two_fallen(breaker_level_min=1, breaker_level_fraction=0.0)
    first = loop.step()
    assert first is not None
    assert first.decision is not None
    assert [a.node for a in first.applied] == ["gpu-node-a"]
    assert [(f.node, f.reason) for f in first.decision.findings] == [
        ("gpu-node-b", decisions.Reason.BREAKER_LEVEL)
    ]
    assert loop.step() is None
    assert cordoned(api) == ["gpu-node-a"]
    assert loop.metrics.registry.get_sample_value("gpuguard_urgent_rewakes_total") == 0


def test_a_dry_run_that_isolated_nothing_does_not_tick_again() -> None:
    loop, api = fleet_of_two_fallen()
    loop.guard.dry_run = True
    result = loop.step()
    assert result is not None
    assert result.decision is not None
    assert result.decision.fast_path_left == ("gpu-node-b",)
    assert loop.step() is None
    assert cordoned(api) == []


def test_a_wake_during_a_tick_is_told_to_that_tick_and_the_next_pass_ticks_at_once() -> None:
    source = fakes.FakeMetrics()
    loop, _ = make(FakeLease(), source)
    told: list[tuple[bool, bool, bool]] = []
    ticked = loop.guard.tick

    def tick_woken_midway(
        *, urgent: bool = False, woken: Callable[[], bool] | None = None
    ) -> tick.TickResult:
        assert woken is not None
        before = woken()
        if not told:  # the agent's condition lands while the regular tick runs
            loop.wake("gpu-1", "GpuFallenOffBus/GpuGoneFromBus")
        told.append((urgent, before, woken()))
        return ticked(urgent=urgent, woken=woken)

    loop.guard.tick = tick_woken_midway  # type: ignore[method-assign]
    assert loop.step() is not None
    assert loop.step() is not None  # no 30 s wait: the woken tick
    assert told == [(False, False, True), (True, False, False)]
