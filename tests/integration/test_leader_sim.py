"""Two electors against one Lease on the simulator's API server, over real HTTP, with short
durations (1 s lease, 0.5 s renew deadline); wherever a test asserts who leads, both electors
read one injected monotonic clock that the test advances (on the real clock a loaded machine
could let the renew deadline pass between two lines of a test)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import lightkube
import pytest

from gpuguard.controller import leader
from tests.conftest import SimApi

NAMESPACE, NAME = "gpuguard", "gpuguard-leader"
LEASE = timedelta(seconds=1)
DEADLINE = timedelta(seconds=0.5)
RETRY = timedelta(seconds=0.05)


@pytest.fixture
def clients(sim_api: SimApi) -> Iterator[tuple[lightkube.Client, lightkube.Client]]:
    """One client per replica, as two pods would have."""
    with (
        lightkube.Client(config=sim_api.config(NAMESPACE)) as one,
        lightkube.Client(config=sim_api.config(NAMESPACE)) as two,
    ):
        yield one, two


class SteppedClock:
    """A monotonic clock that moves only when the test says: ``steps`` retry periods so far."""

    def __init__(self) -> None:
        self.steps = 0

    def __call__(self) -> float:
        return self.steps * RETRY / timedelta(seconds=1)


def elector(
    leases: leader.LeaseStore, identity: str, clock: SteppedClock | None = None
) -> leader.LeaseElector:
    timing = {"lease_duration": LEASE, "renew_deadline": DEADLINE, "retry_period": RETRY}
    if clock is None:
        return leader.LeaseElector(leases, identity, **timing)
    return leader.LeaseElector(leases, identity, **timing, monotonic=clock)


def pair(
    clients: tuple[lightkube.Client, lightkube.Client], clock: SteppedClock | None = None
) -> tuple[leader.LeaseElector, leader.LeaseElector]:
    one, two = clients
    return (
        elector(leader.KubeLeases(one, NAME, NAMESPACE), "guard-a", clock),
        elector(leader.KubeLeases(two, NAME, NAMESPACE), "guard-b", clock),
    )


def stored_holder(sim_api: SimApi) -> str:
    return str(sim_api.store.get("Lease", NAMESPACE, NAME)["spec"]["holderIdentity"])


def leaders(*electors: leader.LeaseElector) -> list[str]:
    return [e.identity for e in electors if e.is_leader()]


def test_exactly_one_leader_across_alternating_attempts(
    sim_api: SimApi, clients: tuple[lightkube.Client, lightkube.Client]
) -> None:
    clock = SteppedClock()
    a, b = pair(clients, clock)
    for _ in range(25):  # one retry period apart: 1.25 s in all, past a lease duration
        clock.steps += 1
        a.try_acquire_or_renew()
        assert leaders(a, b) == ["guard-a"]
        b.try_acquire_or_renew()
        assert leaders(a, b) == ["guard-a"]
    assert stored_holder(sim_api) == "guard-a"
    assert b.holder() == "guard-a"


def test_standby_takes_over_a_paused_leader_only_after_the_lease_duration(
    sim_api: SimApi, clients: tuple[lightkube.Client, lightkube.Client]
) -> None:
    clock = SteppedClock()
    a, b = pair(clients, clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # b first sees a's record now; a stops renewing
    believed, took_over_after = [], None
    while took_over_after is None and clock.steps < 100:
        clock.steps += 1
        believed.append(a.is_leader())
        if b.try_acquire_or_renew():
            took_over_after = clock.steps * RETRY
        assert len(leaders(a, b)) <= 1
    assert took_over_after == LEASE  # the first attempt once a was silent a lease duration
    assert believed.count(True) == DEADLINE // RETRY - 1  # a stopped believing at its deadline
    assert leaders(a, b) == ["guard-b"]
    assert stored_holder(sim_api) == "guard-b"
    assert not a.try_acquire_or_renew()  # a wakes up: it sees b and stands by
    assert sim_api.store.get("Lease", NAMESPACE, NAME)["spec"]["leaseTransitions"] == 1


def test_after_release_the_standby_acquires_on_its_next_attempt(
    sim_api: SimApi, clients: tuple[lightkube.Client, lightkube.Client]
) -> None:
    a, b = pair(clients, SteppedClock())
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    assert a.release()
    assert stored_holder(sim_api) == ""
    assert b.try_acquire_or_renew()
    assert leaders(a, b) == ["guard-b"]
    assert stored_holder(sim_api) == "guard-b"


class _Interleaved:
    """A LeaseStore that runs ``after_read`` between every read and the write that follows,
    to put another replica's move exactly there."""

    def __init__(self, leases: leader.LeaseStore, after_read: Callable[[], object]) -> None:
        self._leases = leases
        self._after_read = after_read

    def read(self) -> leader.StoredLease | None:
        lease = self._leases.read()
        self._after_read()
        return lease

    def create(self, record: leader.LeaseRecord) -> leader.StoredLease:
        return self._leases.create(record)

    def replace(self, record: leader.LeaseRecord, resource_version: str) -> leader.StoredLease:
        return self._leases.replace(record, resource_version)


def intrude(sim_api: SimApi) -> None:
    """Another writer takes the Lease behind everyone's back."""
    lease = sim_api.store.get("Lease", NAMESPACE, NAME)
    lease["spec"]["holderIdentity"] = "intruder"
    sim_api.store.replace("Lease", NAMESPACE, NAME, lease)


def test_a_leader_that_loses_the_version_race_stops_leading(
    sim_api: SimApi, clients: tuple[lightkube.Client, lightkube.Client]
) -> None:
    reads = 0

    def intrude_after_second_read() -> None:
        nonlocal reads
        reads += 1
        if reads == 2:
            intrude(sim_api)

    leases = leader.KubeLeases(clients[0], NAME, NAMESPACE)
    a = elector(_Interleaved(leases, intrude_after_second_read), "guard-a")
    assert a.try_acquire_or_renew()
    assert not a.try_acquire_or_renew()  # its replace carried a stale resourceVersion: 409
    assert not a.is_leader()
    assert stored_holder(sim_api) == "intruder"


def test_release_after_losing_the_lease_leaves_it_alone(
    sim_api: SimApi, clients: tuple[lightkube.Client, lightkube.Client]
) -> None:
    a, _ = pair(clients)
    a.try_acquire_or_renew()
    intrude(sim_api)
    assert not a.release()
    assert stored_holder(sim_api) == "intruder"


def test_racing_creates_exactly_one_wins(
    sim_api: SimApi,
    clients: tuple[lightkube.Client, lightkube.Client],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=leader.__name__)
    both_read = threading.Barrier(2)
    one, two = clients

    def wait_for_both() -> None:
        both_read.wait(timeout=60)

    clock = SteppedClock()
    a = elector(_Interleaved(leader.KubeLeases(one, NAME, NAMESPACE), wait_for_both), "guard-a",
                clock)  # fmt: skip
    b = elector(_Interleaved(leader.KubeLeases(two, NAME, NAMESPACE), wait_for_both), "guard-b",
                clock)  # fmt: skip
    with ThreadPoolExecutor(max_workers=2) as pool:
        won = list(pool.map(lambda e: e.try_acquire_or_renew(), (a, b)))
    assert sorted(won) == [False, True]
    winner = a if won[0] else b
    assert leaders(a, b) == [winner.identity]
    assert stored_holder(sim_api) == winner.identity
    assert "AlreadyExists" in caplog.text  # the loser's create got 409, not a stale read


def test_a_record_survives_the_round_trip_to_microseconds(
    clients: tuple[lightkube.Client, lightkube.Client],
) -> None:
    leases = leader.KubeLeases(clients[0], NAME, NAMESPACE)
    at = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
    written = leases.create(leader.LeaseRecord("guard-a", 15, at, at, 3))
    assert leases.read() == written
    assert written.record == leader.LeaseRecord("guard-a", 15, at, at, 3)


def test_a_lease_the_client_cannot_decode_is_a_lease_error_naming_it(
    sim_api: SimApi, clients: tuple[lightkube.Client, lightkube.Client]
) -> None:
    spec = {"holderIdentity": "guard-x", "leaseDurationSeconds": "fifteen"}
    sim_api.store.create("Lease", NAMESPACE, {"metadata": {"name": NAME}, "spec": spec})
    a, _ = pair(clients)

    with pytest.raises(leader.LeaseError, match=f"Lease {NAMESPACE}/{NAME}") as caught:
        a.try_acquire_or_renew()

    assert type(caught.value.__cause__).__name__ == "ValidationError"
    assert not a.is_leader()
