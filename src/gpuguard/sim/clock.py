"""A simulated clock: a multi-day incident runs in seconds. Implements model.ports.Clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

DEFAULT_EPOCH = datetime(2026, 9, 1, tzinfo=UTC)


class SimClock:
    """Time moves only when ``advance``/``advance_to`` is called."""

    def __init__(self, start: datetime = DEFAULT_EPOCH) -> None:
        if start.tzinfo is None:
            raise ValueError("SimClock needs a timezone-aware start time")
        self._start = start
        self._now = start

    @property
    def start(self) -> datetime:
        return self._start

    def now(self) -> datetime:
        return self._now

    def elapsed(self) -> timedelta:
        return self._now - self._start

    def advance(self, delta: timedelta) -> datetime:
        if delta < timedelta(0):
            raise ValueError(f"the simulated clock cannot go back ({delta})")
        self._now += delta
        return self._now

    def advance_to(self, when: datetime) -> datetime:
        return self.advance(max(timedelta(0), when - self._now))
