"""Fake Leases and a fake monotonic clock for the leader elector's tests, and a stored Lease
record."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from gpuguard.controller import leader
from gpuguard.errors import ConflictError, NotFoundError

DURATION_S = 15
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@dataclass
class FakeTime:
    """A monotonic clock and a wall clock that move independently."""

    mono: float = 1000.0
    wall_at: datetime = T0

    def monotonic(self) -> float:
        return self.mono

    def wall(self) -> datetime:
        return self.wall_at

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall_at += timedelta(seconds=seconds)


@dataclass
class FakeLeases:
    """One Lease in memory with the API server's rules: AlreadyExists and stale-version 409s.

    ``errors`` are raised by the next calls, in order; ``before_write`` runs just before a
    write is applied (to let another replica slip in between a read and a write).
    """

    stored: leader.StoredLease | None = None
    version: int = 0
    errors: list[Exception] = field(default_factory=list)
    before_write: Callable[[], object] | None = None
    writes: list[leader.LeaseRecord] = field(default_factory=list)

    def read(self) -> leader.StoredLease | None:
        self._maybe_fail()
        return self.stored

    def create(self, record: leader.LeaseRecord) -> leader.StoredLease:
        self._maybe_fail()
        self._run_hook()
        if self.stored is not None:
            raise ConflictError("Lease already exists (409 AlreadyExists)")
        return self._store(record)

    def replace(self, record: leader.LeaseRecord, resource_version: str) -> leader.StoredLease:
        self._maybe_fail()
        self._run_hook()
        if self.stored is None:
            raise NotFoundError("Lease not found")
        if self.stored.resource_version != resource_version:
            raise ConflictError("stale resourceVersion (409 Conflict)")
        return self._store(record)

    def put(self, record: leader.LeaseRecord) -> leader.StoredLease:
        """Another replica's write, bypassing every check."""
        return self._store(record)

    @property
    def holder(self) -> str | None:
        return self.stored.record.holder if self.stored else None

    def _store(self, record: leader.LeaseRecord) -> leader.StoredLease:
        self.version += 1
        self.writes.append(record)
        self.stored = leader.StoredLease(record, str(self.version))
        return self.stored

    def _maybe_fail(self) -> None:
        if self.errors:
            raise self.errors.pop(0)

    def _run_hook(self) -> None:
        hook, self.before_write = self.before_write, None
        if hook:
            hook()


def record(
    holder: str, *, duration_s: int = DURATION_S, transitions: int = 0
) -> leader.LeaseRecord:
    return leader.LeaseRecord(holder, duration_s, T0, T0, transitions)
