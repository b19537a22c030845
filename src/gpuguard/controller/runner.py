"""The guard's loop: keep the Lease, tick on the interval while leading, back off on errors,
release the Lease on shutdown. Every write of a tick passes the ``WriteGate`` (leadership
confirmed, renewed when due); liveness says the loop runs, readiness that its sources answer.

The Lease is renewed every ``retry`` (a few seconds, well inside the lease duration); the
tick runs every ``interval`` and only on the leader. After a failed tick the next one waits
longer (doubling, capped), so a broken Prometheus is not hammered; a good tick resets it.
``wake`` (a node newly carrying an unambiguous hardware fault, docs/design.md#fast-path)
makes the loop tick at once — the same tick, policy, breaker and WriteGate; wakes that
arrive before it runs are one tick. A woken tick that isolated one node and left other
fast-path faults to the per-tick limit ticks again at once, until the limit or the breaker
leaves none.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from gpuguard.controller import telemetry, tick
from gpuguard.errors import GpuguardError

log = logging.getLogger(__name__)


class Leadership(Protocol):
    def try_acquire_or_renew(self) -> bool: ...

    def is_leader(self) -> bool: ...

    def release(self) -> object: ...


class WriteLeadership(Protocol):
    def confirm_leader(self) -> bool: ...


@dataclass
class WriteGate:
    """The guard's ``is_leader`` while it ticks: leadership confirmed (renewed when due) before
    every write; a write skipped because leadership lapsed mid-tick is logged and counted
    (``gpuguard_writes_skipped_total``), never silent."""

    leadership: WriteLeadership
    metrics: telemetry.GuardMetrics

    def __call__(self) -> bool:
        if self.leadership.confirm_leader():
            return True
        log.warning("write skipped: leadership lapsed during the tick (the next leader redoes it)")
        self.metrics.writes_skipped.inc()
        return False


def backoff(interval: timedelta, failures: int, cap: timedelta = timedelta(minutes=5)) -> float:
    """Seconds to the next tick after ``failures`` failed ticks in a row (pure)."""
    if failures <= 0:
        return interval.total_seconds()
    grown: float = interval.total_seconds() * 2.0 ** min(failures, 10)
    return min(grown, cap.total_seconds())


@dataclass
class Runner:
    guard: tick.Guard
    leadership: Leadership
    metrics: telemetry.GuardMetrics
    interval: timedelta
    retry: timedelta = timedelta(seconds=2)
    monotonic: Callable[[], float] = time.monotonic
    probe: Callable[[], object] | None = None
    """A standby's look at Prometheus (raises GpuguardError when it cannot answer fresh
    data); None: a standby is ready while the API answers."""

    def __post_init__(self) -> None:
        self._failures = 0
        self._next_tick = 0.0
        self._last_ok: float | None = None
        self._beat: float | None = None  # when the loop last began a pass
        self._lease_answered = False
        self._standby_ok = False  # a standby's last look at Prometheus answered, fresh
        self._next_probe = 0.0
        self._urgent = False  # a wake asked for a tick now
        self._woken = threading.Event()  # ends the wait between passes

    def wake(self, node: str, why: str) -> None:
        """Tick at once (from any thread): ``node`` newly carries ``why``. Wakes before the
        tick runs are coalesced into it; a standby ignores them (its leader has its own)."""
        then = "ticking now" if self.leadership.is_leader() else "standby: the leader ticks"
        log.warning("urgent: %s: %s; %s", node, why, then)
        self.metrics.urgent_wakes.inc()
        self._urgent = True
        self._woken.set()

    def interrupt(self) -> None:
        """End the wait between passes now (``run`` then checks its stop event)."""
        self._woken.set()

    def healthy(self) -> bool:
        """Liveness: the loop is not stuck — it began a pass within three intervals (a tick
        in progress counts from its start). Prometheus or the API being down is readiness,
        not liveness: restarting a healthy replica fixes neither."""
        limit = 3 * self.interval.total_seconds()
        return self._beat is None or self.monotonic() - self._beat < limit

    def ready(self) -> bool:
        """Readiness: the API answers (the last Lease attempt did) and, for the leader, a tick
        decided recently (Prometheus and the API answered it); for a standby, Prometheus
        answered its last look with fresh data (it could take over and decide)."""
        if not self._lease_answered:
            return False
        if not self.leadership.is_leader():
            return self._standby_ok
        limit = 3 * self.interval.total_seconds() + backoff(self.interval, self._failures)
        return self._last_ok is not None and self.monotonic() - self._last_ok < limit

    def step(self) -> tick.TickResult | None:
        """One pass: renew the Lease, then tick if leading and due."""
        self._beat = self.monotonic()
        try:
            leading = self.leadership.try_acquire_or_renew()
            self._lease_answered = True
        except GpuguardError as e:
            log.warning("lease renewal failed: %s", e)
            self._lease_answered = False
            leading = self.leadership.is_leader()
        self.metrics.set_leading(leading)
        now = self.monotonic()
        urgent, self._urgent = self._urgent, False
        if not leading:
            self._look_at_prometheus(now)
            return None
        if now < self._next_tick and not urgent:
            return None
        if urgent:
            self.metrics.urgent_ticks.inc()
        try:
            result = self.guard.tick(urgent=urgent, woken=self._woken_since)
        except Exception as e:  # nothing handled it (controller.failsafe): fail closed, go on
            log.exception("tick failed closed: %s: %s", type(e).__name__, e)
            error = f"{type(e).__name__}: {e}"
            result = tick.TickResult(at=self.guard.clock.now(), error=error, error_kind="internal")
        self.metrics.observe(result)
        self._failures = 0 if result.ok else self._failures + 1
        if result.ok:
            self._last_ok = self.monotonic()
        self._next_tick = now + backoff(self.interval, self._failures)
        self._beat = self.monotonic()
        self._again(result)
        return result

    def _woken_since(self) -> bool:
        """A wake came since this pass began: the tick leaves its later steps to the next."""
        return self._urgent

    def _look_at_prometheus(self, now: float) -> None:
        """A standby asks Prometheus for the freshness series once per interval."""
        if now < self._next_probe:
            return
        self._next_probe = now + self.interval.total_seconds()
        if self.probe is None:
            self._standby_ok = True
            return
        try:
            self.probe()
        except GpuguardError as e:
            log.warning("standby: Prometheus cannot answer (not ready): %s", e)
            self._standby_ok = False
        else:
            self._standby_ok = True

    def _again(self, result: tick.TickResult) -> None:
        """Tick again at once for fast-path faults the per-tick limit left (``tick_again``)."""
        left = result.tick_again
        if not left:
            return
        limit = self.guard.settings.isolation.max_isolations_per_tick
        log.warning("urgent: %s left to the per-tick limit (%d); ticking again now",
                    ", ".join(left), limit)  # fmt: skip
        self.metrics.urgent_rewakes.inc()
        self._urgent = True

    def run(self, stop: threading.Event) -> None:
        """Until ``stop`` is set (SIGTERM); then give the Lease up for a fast hand-over."""
        try:
            while not stop.is_set():
                self.step()
                if not self._urgent:
                    self._woken.wait(self.retry.total_seconds())
                self._woken.clear()
        finally:
            try:
                self.leadership.release()
            except GpuguardError as e:
                log.warning("could not release the lease (it will expire): %s", e)
