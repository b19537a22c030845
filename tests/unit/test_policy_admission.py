"""The storm breaker across fleet sizes: one fault, two faults an hour apart, 30 % at once, a
trip that holds, and isolations that no longer count (docs/breaker.md has the same table)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from gpuguard.model import annotation_keys, decisions, fleet, settings
from gpuguard.policy import admission

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
DEFAULTS = settings.IsolationSettings()
SIZES = [1, 3, 4, 20, 200, 10_000]
Reason = decisions.Reason


def candidates(count: int, *, prefix: str = "new") -> list[admission.Candidate]:
    return [admission.Candidate(f"{prefix}-{i:05d}", rank=0) for i in range(count)]


def unconfirmed(count: int, *, ago: timedelta) -> list[admission.Isolation]:
    return [admission.Isolation(f"old-{i}", NOW - ago, confirmed=False) for i in range(count)]


def admit(
    wanted: list[admission.Candidate],
    history: list[admission.Isolation] | None = None,
    *,
    size: int,
    tripped_at: datetime | None = None,
    isolation: settings.IsolationSettings = DEFAULTS,
) -> admission.Admission:
    return admission.admit(wanted, history or [], tripped_at, size, isolation, NOW)


@pytest.mark.parametrize(
    ("size", "rate", "level", "burst"),
    [
        (1, 2, 2, 3),
        (3, 2, 2, 3),
        (4, 2, 2, 3),
        (20, 2, 2, 3),
        (200, 2, 10, 3),
        (10_000, 100, 500, 100),
    ],
)
def test_default_limits_per_fleet_size(size: int, rate: int, level: int, burst: int) -> None:
    limits = admission.Limits.for_fleet(size, DEFAULTS)
    assert (limits.rate, limits.level, limits.burst) == (rate, level, burst)


@pytest.mark.parametrize("size", SIZES)
def test_one_fault_is_isolated_at_every_size(size: int) -> None:
    result = admit(candidates(1), size=size)
    assert result.admitted == ("new-00000",)
    assert not result.state.tripped


@pytest.mark.parametrize("size", SIZES[1:])
def test_two_unrelated_faults_an_hour_apart_are_both_isolated(size: int) -> None:
    # the first isolation has no verdict yet (the worst case: its evidence Job is slow)
    result = admit(candidates(1), unconfirmed(1, ago=timedelta(hours=1)), size=size)
    assert result.admitted == ("new-00000",)


@pytest.mark.parametrize(
    ("size", "admitted", "tripped"),
    [
        (3, 1, False),  # 30 % of 3 is one node: an ordinary fault
        (4, 1, False),
        (20, 1, True),  # 6 at once: trip, isolate one, withhold five
        (200, 1, True),
        (10_000, 1, True),
    ],
)
def test_thirty_percent_at_once(size: int, admitted: int, tripped: bool) -> None:
    count = max(1, math.floor(0.3 * size))
    result = admit(candidates(count), size=size)
    assert len(result.admitted) == admitted
    assert result.state.tripped_now is tripped
    if tripped:
        assert {why for _, why in result.withheld} == {Reason.BREAKER_TRIPPED}
        assert len(result.withheld) == count - 1


@pytest.mark.parametrize("size", SIZES)
def test_a_trip_holds_whatever_time_passes(size: int) -> None:
    # a trip is over only when the candidates clear or a person resets it: no window drains it
    result = admit(candidates(1), size=size, tripped_at=NOW - timedelta(days=3))
    assert result.admitted == ()
    assert result.withheld == (("new-00000", Reason.BREAKER_TRIPPED),)
    assert result.state.open


@pytest.mark.parametrize("size", SIZES)
def test_isolations_confirmed_or_held_do_not_count(size: int) -> None:
    waiting = [admission.Isolation(f"old-{i}", NOW, confirmed=True) for i in range(40)]
    result = admit(candidates(1), waiting, size=size)
    assert result.admitted == ("new-00000",)
    assert result.state.confirmed_or_held == 40


def test_rate_counts_only_isolations_started_within_the_window() -> None:
    recent = unconfirmed(2, ago=timedelta(minutes=30))
    assert admit(candidates(1), recent, size=200).withheld == (("new-00000", Reason.BREAKER_RATE),)
    older = unconfirmed(2, ago=timedelta(hours=2))
    assert admit(candidates(1), older, size=200).admitted == ("new-00000",)


def test_level_counts_unconfirmed_isolations_of_any_age() -> None:
    out = unconfirmed(10, ago=timedelta(days=10))
    result = admit(candidates(1), out, size=200)
    assert result.withheld == (("new-00000", Reason.BREAKER_LEVEL),)


def test_the_level_can_be_capped_in_nodes() -> None:
    capped = settings.IsolationSettings(breaker_level_max_nodes=50)
    assert admission.Limits.for_fleet(10_000, capped).level == 50


def test_an_isolation_of_unknown_age_counts_as_recent() -> None:
    unknown = [admission.Isolation(f"old-{i}", None, confirmed=False) for i in range(2)]
    assert admit(candidates(1), unknown, size=200).admitted == ()


def test_the_per_tick_limit_is_not_the_breaker() -> None:
    result = admit(candidates(2), size=200)
    assert result.admitted == ("new-00000",)
    assert result.withheld == (("new-00001", Reason.TICK_LIMIT),)
    assert not result.state.open


def test_fast_path_goes_first_whatever_the_name() -> None:
    wanted = [admission.Candidate("a-phantom", rank=2), admission.Candidate("z-xid79", rank=0)]
    assert admit(wanted, size=200).admitted == ("z-xid79",)


def node(name: str, marks: dict[str, str], *, cordoned: bool = True) -> fleet.Node:
    return fleet.Node(name, "boot", 8, 7, unschedulable=cordoned, annotations=marks)


def test_history_reads_gpuguards_marks_only() -> None:
    at = "2026-12-01T11:00:00Z"
    nodes = [
        node("unconfirmed", {annotation_keys.ISOLATED_AT: at}),
        node(
            "rebooting", {annotation_keys.ISOLATED_AT: at, annotation_keys.VERDICT: "power-cycle"}
        ),
        node(
            "unsure", {annotation_keys.ISOLATED_AT: at, annotation_keys.VERDICT: "human-diagnosis"}
        ),
        node("held", {annotation_keys.ISOLATED_AT: at, annotation_keys.HOLD: "card on order"}),
        node("human", {}),
        node("returned", {}, cordoned=False),
        node("garbled", {annotation_keys.ISOLATED_AT: "yesterday"}),
    ]
    history = {i.node: i for i in admission.history(nodes)}
    assert set(history) == {"unconfirmed", "rebooting", "unsure", "held", "garbled"}
    assert [n for n, i in history.items() if i.confirmed] == ["rebooting", "held"]
    assert history["garbled"].at is None


@pytest.mark.parametrize(("writers", "counted"), [
    pytest.param(frozenset({annotation_keys.FIELD_MANAGER}), True, id="gpuguards-marks-count"),
    pytest.param(None, True, id="writers-not-read-count"),
    pytest.param(frozenset({"kubectl-annotate"}), False, id="a-persons-marks-do-not"),
    pytest.param(frozenset(), False, id="stripped-managed-fields-do-not"),
])
def test_the_breaker_counts_only_marks_gpuguard_wrote(
    writers: frozenset[str] | None, counted: bool
) -> None:
    marked = fleet.Node("forged", "boot", 8, 7, unschedulable=True, isolation_writers=writers,
                        annotations={annotation_keys.ISOLATED_AT: "2026-12-01T11:00:00Z"})
    assert [i.node for i in admission.history([marked])] == (["forged"] if counted else [])
