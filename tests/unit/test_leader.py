"""Leader election: the pure decision, and the elector over an in-memory Lease with fake
clocks (monotonic and wall apart, so a wall-clock jump can be shown not to matter)."""

from __future__ import annotations

from datetime import timedelta

import httpx2
import pytest
from lightkube import ApiError
from lightkube.models.meta_v1 import Status

from gpuguard.controller import leader
from gpuguard.errors import ConflictError, InputError, NotFoundError
from tests.leases import DURATION_S, T0, FakeLeases, FakeTime, record


def elector(leases: FakeLeases, clock: FakeTime, identity: str) -> leader.LeaseElector:
    return leader.LeaseElector(
        leases,
        identity,
        lease_duration=timedelta(seconds=DURATION_S),
        renew_deadline=timedelta(seconds=10),
        retry_period=timedelta(seconds=2),
        monotonic=clock.monotonic,
        wall=clock.wall,
    )


@pytest.fixture
def clock() -> FakeTime:
    return FakeTime()


@pytest.fixture
def leases() -> FakeLeases:
    return FakeLeases()




def seen(holder: str, at: float, *, duration_s: int = DURATION_S) -> leader.Observation:
    return leader.Observation(leader.StoredLease(record(holder, duration_s=duration_s), "7"), at)


# --- the pure decision ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("observed", "now", "move"),
    [
        pytest.param(None, 0.0, leader.LeaseMove.CREATE, id="no-lease-creates"),
        pytest.param(seen("me", 0.0), 999.0, leader.LeaseMove.RENEW, id="mine-renews"),
        pytest.param(seen("", 0.0), 0.0, leader.LeaseMove.TAKE_OVER, id="released-taken-at-once"),
        pytest.param(seen("b", 100.0), 114.9, leader.LeaseMove.STAND_BY, id="b-renewed-recently"),
        pytest.param(seen("b", 100.0), 115.0, leader.LeaseMove.TAKE_OVER, id="b-silent-15s"),
        pytest.param(
            seen("b", 100.0, duration_s=60),
            130.0,
            leader.LeaseMove.STAND_BY,
            id="holder-duration-not-mine-decides",
        ),
    ],
)
def test_decide(observed: leader.Observation | None, now: float, move: leader.LeaseMove) -> None:
    assert leader.decide(observed, "me", now).move is move


def test_observe_keeps_first_seen_time_until_the_lease_changes() -> None:
    lease = leader.StoredLease(record("b"), "7")
    first = leader.observe(None, lease, now=10.0)
    assert leader.observe(first, leader.StoredLease(record("b"), "7"), now=20.0) == first
    renewed = leader.StoredLease(record("b"), "8")
    assert leader.observe(first, renewed, now=20.0) == leader.Observation(renewed, 20.0)
    assert leader.observe(first, None, now=20.0) is None


def test_claimed_renew_keeps_acquire_time_and_transitions() -> None:
    later = T0 + timedelta(seconds=5)
    mine = record("me", transitions=3)
    renewed = leader.claimed(leader.LeaseMove.RENEW, mine, "me", later, DURATION_S)
    assert (renewed.acquire_time, renewed.renew_time, renewed.transitions) == (T0, later, 3)


def test_claimed_take_over_counts_a_transition() -> None:
    later = T0 + timedelta(seconds=5)
    taken = leader.claimed(leader.LeaseMove.TAKE_OVER, record("b", transitions=3), "me", later, 15)
    assert taken == leader.LeaseRecord("me", 15, later, later, 4)


def test_renew_with_a_stuck_or_stepped_back_wall_clock_still_changes_the_record() -> None:
    mine = record("me")
    back = T0 - timedelta(hours=1)
    renewed = leader.claimed(leader.LeaseMove.RENEW, mine, "me", back, DURATION_S)
    assert renewed.renew_time is not None
    assert renewed.renew_time > T0


@pytest.mark.parametrize(
    ("duration", "deadline", "retry"),
    [
        pytest.param(15, 15, 2, id="deadline-not-below-duration"),
        pytest.param(15, 10, 10, id="retry-not-below-deadline"),
        pytest.param(15, 10, 0, id="retry-zero"),
        pytest.param(1.5, 1, 0.5, id="duration-not-whole-seconds"),
    ],
)
def test_bad_timing_fails_at_start(duration: float, deadline: float, retry: float) -> None:
    with pytest.raises(InputError, match="leader election"):
        leader.LeaseElector(
            FakeLeases(),
            "me",
            lease_duration=timedelta(seconds=duration),
            renew_deadline=timedelta(seconds=deadline),
            retry_period=timedelta(seconds=retry),
        )


# --- the elector over an in-memory Lease ---------------------------------------------------


def test_acquires_an_absent_lease(leases: FakeLeases, clock: FakeTime) -> None:
    a = elector(leases, clock, "a")
    assert not a.is_leader()
    assert a.try_acquire_or_renew()
    assert a.is_leader()
    assert a.holder() == "a"
    assert leases.writes == [leader.LeaseRecord("a", DURATION_S, T0, T0, 0)]


def test_renews_a_lease_it_holds(leases: FakeLeases, clock: FakeTime) -> None:
    a = elector(leases, clock, "a")
    a.try_acquire_or_renew()
    clock.advance(2)
    assert a.try_acquire_or_renew()
    renewed = leases.writes[-1]
    assert (renewed.holder, renewed.acquire_time, renewed.transitions) == ("a", T0, 0)
    assert renewed.renew_time == T0 + timedelta(seconds=2)


def test_standby_waits_a_full_lease_duration_on_its_own_clock(
    leases: FakeLeases, clock: FakeTime
) -> None:
    a, b = elector(leases, clock, "a"), elector(leases, clock, "b")
    a.try_acquire_or_renew()
    clock.advance(20)  # a is silent, but b has not watched it for a lease duration yet
    assert not b.try_acquire_or_renew()
    clock.advance(DURATION_S - 0.1)
    assert not b.try_acquire_or_renew()
    assert (b.holder(), leases.holder) == ("a", "a")
    clock.advance(0.1)
    assert b.try_acquire_or_renew()
    assert leases.stored is not None
    assert leases.stored.record == leader.LeaseRecord(
        "b", DURATION_S, clock.wall(), clock.wall(), 1
    )


def test_standby_never_takes_over_while_the_leader_renews(
    leases: FakeLeases, clock: FakeTime
) -> None:
    a, b = elector(leases, clock, "a"), elector(leases, clock, "b")
    for _ in range(30):
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
        assert a.is_leader()
        assert not b.is_leader()
        clock.advance(2)


def test_conflict_on_replace_means_not_leader(leases: FakeLeases, clock: FakeTime) -> None:
    a, b = elector(leases, clock, "a"), elector(leases, clock, "b")
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    clock.advance(DURATION_S)
    leases.before_write = a.try_acquire_or_renew  # a renews in between
    assert not b.try_acquire_or_renew()
    assert not b.is_leader()
    assert leases.holder == "a"


def test_leader_that_loses_a_race_stops_leading_at_once(
    leases: FakeLeases, clock: FakeTime
) -> None:
    a = elector(leases, clock, "a")
    a.try_acquire_or_renew()
    leases.before_write = lambda: leases.put(record("b"))  # someone else wrote first
    assert not a.try_acquire_or_renew()
    assert not a.is_leader()


def test_create_race_lost_means_not_leader(leases: FakeLeases, clock: FakeTime) -> None:
    b = elector(leases, clock, "b")
    leases.before_write = lambda: leases.put(record("a"))
    assert not b.try_acquire_or_renew()
    assert not b.is_leader()


def test_leader_that_cannot_renew_stops_leading_at_the_renew_deadline(
    leases: FakeLeases, clock: FakeTime
) -> None:
    a = elector(leases, clock, "a")
    a.try_acquire_or_renew()
    for _ in range(4):
        clock.advance(2)
        leases.errors.append(leader.LeaseError("API server unreachable"))
        with pytest.raises(leader.LeaseError):
            a.try_acquire_or_renew()
    clock.advance(1.9)
    assert a.is_leader()
    a.ensure_leader()
    clock.advance(0.1)
    assert not a.is_leader()
    with pytest.raises(leader.NotLeader, match="no successful renew"):
        a.ensure_leader()


def test_ensure_leader_names_the_holder(leases: FakeLeases, clock: FakeTime) -> None:
    a, b = elector(leases, clock, "a"), elector(leases, clock, "b")
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    with pytest.raises(leader.NotLeader, match="holder: a"):
        b.ensure_leader()


def test_release_clears_the_holder_and_the_standby_takes_over_at_once(
    leases: FakeLeases, clock: FakeTime
) -> None:
    a, b = elector(leases, clock, "a"), elector(leases, clock, "b")
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    assert a.release()
    assert not a.is_leader()
    assert leases.stored is not None
    assert (leases.stored.record.holder, leases.stored.record.duration_s) == ("", 1)
    assert b.try_acquire_or_renew()
    assert leases.stored.record.transitions == 1


def test_release_when_not_holding_writes_nothing(leases: FakeLeases, clock: FakeTime) -> None:
    a, b = elector(leases, clock, "a"), elector(leases, clock, "b")
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    writes = len(leases.writes)
    assert not b.release()
    assert len(leases.writes) == writes


def test_release_after_losing_the_lease_does_not_clobber_it(
    leases: FakeLeases, clock: FakeTime
) -> None:
    a = elector(leases, clock, "a")
    a.try_acquire_or_renew()
    leases.put(record("b"))
    assert not a.release()
    assert leases.holder == "b"


def test_wall_clock_jumps_do_not_change_decisions(leases: FakeLeases, clock: FakeTime) -> None:
    a, b = elector(leases, clock, "a"), elector(leases, clock, "b")
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    clock.wall_at += timedelta(days=1)  # far past any renewTime: still no take-over
    clock.mono += 5
    assert not b.try_acquire_or_renew()
    clock.wall_at -= timedelta(days=2)  # a renews "in the past": still a visible renew
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # b sees the change now
    clock.mono += DURATION_S - 1
    assert not b.try_acquire_or_renew()
    assert not a.is_leader()  # a's own renew deadline passed (14 s > 10 s)
    clock.mono += 1
    assert b.try_acquire_or_renew()


def test_renew_for_attempts_every_retry_period(leases: FakeLeases, clock: FakeTime) -> None:
    a = elector(leases, clock, "a")
    waits: list[float] = []

    def wait(seconds: float) -> bool:
        waits.append(seconds)
        clock.advance(seconds)
        return False

    leases.errors.append(leader.LeaseError("blip"))  # logged and retried, not raised
    assert a.renew_for(5, wait=wait) is False
    assert waits == [2, 2, 1]
    assert len(leases.writes) == 3
    assert a.is_leader()


def test_renew_for_stops_when_asked(leases: FakeLeases, clock: FakeTime) -> None:
    a = elector(leases, clock, "a")
    assert a.renew_for(30, wait=lambda _s: True) is True
    assert len(leases.writes) == 1


# --- the lightkube adapter's error mapping ---------------------------------------------------


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        pytest.param(ApiError(status=Status(code=409, reason="Conflict")), ConflictError, id="409"),
        pytest.param(ApiError(status=Status(code=404, reason="NotFound")), NotFoundError, id="404"),
        pytest.param(
            ApiError(status=Status(code=500, message="etcd timeout")), leader.LeaseError, id="500"
        ),
        pytest.param(httpx2.ConnectError("refused"), leader.LeaseError, id="unreachable"),
    ],
)
def test_api_errors_become_gpuguard_errors(error: Exception, expected: type[Exception]) -> None:
    with pytest.raises(expected) as caught, leader.translate_api_errors("Lease gpuguard/leader"):
        raise error
    assert caught.value.__cause__ is error
