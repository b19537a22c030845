"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics.

Two guard replicas must never act at once (docs/design.md#invariants), so:

- A candidate takes a Lease held by someone else only once the holder's record has not
  changed for the Lease's ``leaseDurationSeconds``, timed on the candidate's own MONOTONIC
  clock from when it first saw that record. The remote ``renewTime`` is never compared with
  the local wall clock (clock skew, NTP steps).
- Every write carries the ``resourceVersion`` that was read; a 409 means another replica
  wrote first: we are not leader.
- The leader believes it leads only until its last successful renew + the renew deadline,
  which is shorter than the lease duration, so a paused or partitioned leader stops acting
  before a standby can take over. ``ensure_leader()`` is called before every write.
- ``release()`` (on SIGTERM) empties the holder so a standby takes over at once.
- ``confirm_leader()`` before each write renews a renew older than the retry period, so a
  tick longer than the renew deadline keeps its writes only while the Lease is really held.

``decide`` is the pure decision; ``LeaseElector`` is the loop-facing shell around it and
``KubeLeases`` the thin lightkube adapter that reads and writes the one Lease.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from lightkube import Client
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease

from gpuguard.clients import kube as api_errors
from gpuguard.errors import ConflictError, GpuguardError, InputError, NotFoundError

log = logging.getLogger(__name__)

DEFAULT_LEASE_DURATION = timedelta(seconds=15)
DEFAULT_RENEW_DEADLINE = timedelta(seconds=10)
DEFAULT_RETRY_PERIOD = timedelta(seconds=2)
RELEASED_DURATION_S = 1
_ONE_TICK = timedelta(microseconds=1)


class NotLeader(GpuguardError):
    """This replica does not hold the Lease (or could not renew it in time): do not write."""


class LeaseError(GpuguardError):
    """The Lease could not be read or written: neither a won nor a lost race."""


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The part of a Lease that elections read and write (client-go's election record)."""

    holder: str  # "" when released or never held
    duration_s: int
    acquire_time: datetime | None
    renew_time: datetime | None
    transitions: int


@dataclass(frozen=True, slots=True)
class StoredLease:
    """A Lease record as the API server holds it, with the version every write must carry."""

    record: LeaseRecord
    resource_version: str


@dataclass(frozen=True, slots=True)
class Observation:
    """The Lease version last seen, and when (my monotonic clock) it was first seen."""

    lease: StoredLease
    seen_at: float


class LeaseMove(enum.StrEnum):
    """What one attempt does with the Lease (not a repair verdict: see model.decisions)."""

    CREATE = "create"  # no Lease yet
    RENEW = "renew"  # I hold it
    TAKE_OVER = "take-over"  # released, or its holder went silent for its duration
    STAND_BY = "stand-by"  # someone else holds it and renewed recently (on my clock)


@dataclass(frozen=True, slots=True)
class Decision:
    move: LeaseMove
    reason: str


def observe(
    previous: Observation | None, lease: StoredLease | None, now: float
) -> Observation | None:
    """Keep the first-seen time while the Lease is unchanged; restart it on any change."""
    if lease is None:
        return None
    if previous is not None and previous.lease == lease:
        return previous
    return Observation(lease, now)


def decide(observed: Observation | None, me: str, now: float) -> Decision:
    """What one attempt should do, given the Lease as last read and my monotonic ``now``."""
    if observed is None:
        return Decision(LeaseMove.CREATE, "no Lease yet")
    record = observed.lease.record
    if record.holder == me:
        return Decision(LeaseMove.RENEW, "held by me")
    if not record.holder:
        return Decision(LeaseMove.TAKE_OVER, "released, no holder")
    silent_s = now - observed.seen_at
    if silent_s >= record.duration_s:
        why = f"{record.holder} silent for {silent_s:.1f}s >= {record.duration_s}s (my clock)"
        return Decision(LeaseMove.TAKE_OVER, why)
    why = f"held by {record.holder}, unchanged for {silent_s:.1f}s < {record.duration_s}s"
    return Decision(LeaseMove.STAND_BY, why)


def claimed(
    move: LeaseMove, current: LeaseRecord | None, me: str, wall: datetime, duration_s: int
) -> LeaseRecord:
    """The record to write for a CREATE, RENEW or TAKE_OVER move."""
    if move is LeaseMove.RENEW and current is not None:
        return dataclasses.replace(
            current, duration_s=duration_s, renew_time=_later(current.renew_time, wall)
        )
    transitions = current.transitions + 1 if current is not None else 0
    return LeaseRecord(me, duration_s, wall, wall, transitions)


def released(current: LeaseRecord, wall: datetime) -> LeaseRecord:
    """The record that hands the Lease over: no holder, shortest duration (as client-go)."""
    return dataclasses.replace(
        current,
        holder="",
        duration_s=RELEASED_DURATION_S,
        acquire_time=wall,
        renew_time=_later(current.renew_time, wall),
    )


def _later(previous: datetime | None, wall: datetime) -> datetime:
    """``wall``, nudged past ``previous`` so that every write visibly changes the record
    (a stuck or stepped-back wall clock must not make a renew look like silence)."""
    return wall if previous is None or wall > previous else previous + _ONE_TICK


class LeaseStore(Protocol):
    """The one Lease: read, create, replace. Raises ConflictError, NotFoundError, LeaseError."""

    def read(self) -> StoredLease | None: ...

    def create(self, record: LeaseRecord) -> StoredLease: ...

    def replace(self, record: LeaseRecord, resource_version: str) -> StoredLease: ...


class LeaseElector:
    """One replica's candidacy for the Lease; the controller drives it, nothing runs behind it.

    Call ``try_acquire_or_renew()`` every retry period (or use ``renew_for`` as the wait
    between ticks), ``ensure_leader()`` before every write, ``release()`` on SIGTERM.
    """

    def __init__(
        self,
        leases: LeaseStore,
        identity: str,
        *,
        lease_duration: timedelta = DEFAULT_LEASE_DURATION,
        renew_deadline: timedelta = DEFAULT_RENEW_DEADLINE,
        retry_period: timedelta = DEFAULT_RETRY_PERIOD,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        _check_timing(identity, lease_duration, renew_deadline, retry_period)
        self._leases = leases
        self._identity = identity
        self._duration_s = int(lease_duration.total_seconds())
        self._renew_deadline_s = renew_deadline.total_seconds()
        self.retry_period_s = retry_period.total_seconds()
        self._monotonic = monotonic
        self._wall = wall
        self._observed: Observation | None = None
        self._renewed_at: float | None = None  # monotonic start of my last successful write

    @property
    def identity(self) -> str:
        return self._identity

    def holder(self) -> str | None:
        """The holder as last read or written (no API call); None when nobody holds it."""
        return (self._observed.lease.record.holder or None) if self._observed else None

    def is_leader(self) -> bool:
        """True until the renew deadline has passed since my last successful renew."""
        if self._renewed_at is None:
            return False
        return self._monotonic() - self._renewed_at < self._renew_deadline_s

    def ensure_leader(self) -> None:
        """Raise NotLeader unless ``is_leader()``: the guard before every write."""
        if self.is_leader():
            return
        holder = self.holder()
        if holder == self._identity:
            raise NotLeader(f"{holder}: no successful renew within {self._renew_deadline_s}s")
        raise NotLeader(f"{self._identity} is not the leader (Lease holder: {holder})")

    def confirm_leader(self) -> bool:
        """Leadership checked right before a write: a renew older than one retry period is
        renewed now, so a long tick (a LIST of every pod, webhook timeouts, ledger retries)
        keeps its late writes while it truly leads, and loses them the moment it does not."""
        if self.is_leader() and self._renewed_at is not None and (
            self._monotonic() - self._renewed_at < self.retry_period_s
        ):
            return True
        try:
            return self.try_acquire_or_renew()
        except LeaseError as e:
            log.warning("%s: could not renew the Lease before a write: %s", self._identity, e)
            return self.is_leader()

    def try_acquire_or_renew(self) -> bool:
        """One attempt: read, decide, write. True when I lead now.

        A lost race (409) or another live holder ends my leadership at once. LeaseError
        (API unreachable, 5xx) changes nothing: leadership then lapses at the renew deadline.
        """
        now = self._monotonic()
        self._observed = observe(self._observed, self._leases.read(), now)
        decision = decide(self._observed, self._identity, now)
        log.debug("%s: %s (%s)", self._identity, decision.move, decision.reason)
        if decision.move is LeaseMove.STAND_BY:
            self._renewed_at = None
            return False
        try:
            written = self._write(decision.move)
        except (ConflictError, NotFoundError) as e:
            log.info("%s: lost the Lease (%s): %s", self._identity, decision.reason, e)
            self._renewed_at = None
            return False
        if decision.move is not LeaseMove.RENEW:
            log.info("%s: leading now (%s)", self._identity, decision.reason)
        self._observed, self._renewed_at = Observation(written, now), now
        return True

    def release(self) -> bool:
        """Give the Lease up now if the last record I saw names me; True when handed over.

        Leadership ends locally first, whatever the write's outcome; a 409 or 404 (someone
        else moved on) returns False, an unreachable API raises LeaseError.
        """
        self._renewed_at = None
        if self._observed is None or self._observed.lease.record.holder != self._identity:
            return False
        current = self._observed.lease
        try:
            written = self._leases.replace(
                released(current.record, self._wall()), current.resource_version
            )
        except (ConflictError, NotFoundError) as e:
            log.info("%s: nothing to release, the Lease moved on: %s", self._identity, e)
            return False
        self._observed = Observation(written, self._monotonic())
        return True

    def renew_for(self, seconds: float, *, wait: Callable[[float], bool] | None = None) -> bool:
        """Attempt every retry period for ``seconds``: the controller's wait between ticks.

        ``wait(s)`` blocks up to ``s`` seconds and returns True to stop early (e.g. a
        ``threading.Event.wait`` set on SIGTERM); returns whether it stopped early.
        LeaseError is logged and retried here: leadership lapses by itself at the deadline.
        """
        wait = wait or _sleep
        until = self._monotonic() + seconds
        while True:
            try:
                self.try_acquire_or_renew()
            except LeaseError as e:
                log.warning("%s: Lease attempt failed, will retry: %s", self._identity, e)
            left = until - self._monotonic()
            if left <= 0:
                return False
            if wait(min(self.retry_period_s, left)):
                return True

    def _write(self, move: LeaseMove) -> StoredLease:
        current = self._observed.lease if self._observed else None
        record = claimed(
            move,
            current.record if current else None,
            self._identity,
            self._wall(),
            self._duration_s,
        )
        if current is None:
            return self._leases.create(record)
        return self._leases.replace(record, current.resource_version)


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return False


def _check_timing(
    identity: str, lease_duration: timedelta, renew_deadline: timedelta, retry_period: timedelta
) -> None:
    """client-go's rules: retry period < renew deadline < lease duration (whole seconds)."""
    if not identity:
        raise InputError("leader election: identity must not be empty")
    seconds = lease_duration.total_seconds()
    if seconds < 1 or seconds != int(seconds):
        raise InputError(f"leader election: lease_duration must be whole seconds >= 1: {seconds}")
    if not timedelta(0) < retry_period < renew_deadline < lease_duration:
        raise InputError(
            "leader election: need 0 < retry_period < renew_deadline < lease_duration, got "
            f"{retry_period}, {renew_deadline}, {lease_duration}"
        )


class KubeLeases:
    """``LeaseStore`` over lightkube: every write is a create or a resourceVersion-guarded
    replace; HTTP errors become gpuguard's (409 ConflictError, 404 NotFoundError, else
    LeaseError). Replace writes only name, namespace and spec: the Lease is gpuguard's own."""

    def __init__(self, client: Client, name: str, namespace: str) -> None:
        self._client = client
        self._name = name
        self._namespace = namespace
        self._what = f"Lease {namespace}/{name}"

    def read(self) -> StoredLease | None:
        try:
            with translate_api_errors(self._what):
                lease = self._client.get(Lease, self._name, namespace=self._namespace)
        except NotFoundError:
            return None
        return _stored(lease, self._what)

    def create(self, record: LeaseRecord) -> StoredLease:
        with translate_api_errors(self._what):
            lease = self._client.create(self._lease(record), namespace=self._namespace)
        return _stored(lease, self._what)

    def replace(self, record: LeaseRecord, resource_version: str) -> StoredLease:
        with translate_api_errors(self._what):
            lease = self._client.replace(self._lease(record, resource_version))
        return _stored(lease, self._what)

    def _lease(self, record: LeaseRecord, resource_version: str | None = None) -> Lease:
        meta = ObjectMeta(
            name=self._name, namespace=self._namespace, resourceVersion=resource_version
        )
        return Lease(metadata=meta, spec=to_spec(record))


def to_spec(record: LeaseRecord) -> LeaseSpec:
    return LeaseSpec(
        holderIdentity=record.holder,
        leaseDurationSeconds=record.duration_s,
        acquireTime=record.acquire_time,
        renewTime=record.renew_time,
        leaseTransitions=record.transitions,
    )


def _stored(lease: Lease, what: str) -> StoredLease:
    version = lease.metadata.resourceVersion if lease.metadata else None
    if not version:
        raise LeaseError(f"{what}: the API server returned it without a resourceVersion")
    spec = lease.spec or LeaseSpec()
    record = LeaseRecord(
        holder=spec.holderIdentity or "",
        duration_s=spec.leaseDurationSeconds or int(DEFAULT_LEASE_DURATION.total_seconds()),
        acquire_time=spec.acquireTime,
        renew_time=spec.renewTime,
        transitions=spec.leaseTransitions or 0,
    )
    return StoredLease(record, version)


def translate_api_errors(what: str) -> contextlib.AbstractContextManager[None]:
    """lightkube's and httpx's errors as gpuguard's, chained (LeaseError for the rest)."""
    return api_errors.translated(what, LeaseError)
