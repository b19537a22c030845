"""Backtest replays the policy over history: catches the Xid 79, never isolates twice,
counts instants without data instead of guessing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpuguard.controller import backtest
from gpuguard.errors import SourceError
from gpuguard.model import decisions, fleet, settings
from gpuguard.model import metric_names as names

T0 = datetime(2026, 9, 21, 5, 50, tzinfo=UTC)
STEP = timedelta(minutes=1)


class Classifier:
    def is_hardware(self, code: int) -> bool:
        return code not in {13, 31, 43, 45, 68, 109}


def at_minute(minute: int) -> tuple[datetime, tuple[fleet.MetricSample, ...]]:
    at = T0 + minute * STEP
    lost = minute >= 3

    def s(name: str, labels: dict[str, str], value: float) -> fleet.MetricSample:
        return fleet.MetricSample(name, labels, value, at)

    samples = [
        s(names.KSM_NODE_CAPACITY, {"node": "gpu-node-b"}, 8),
        s(names.KSM_NODE_ALLOCATABLE, {"node": "gpu-node-b"}, 7 if lost else 8),
        s(names.KSM_NODE_UNSCHEDULABLE, {"node": "gpu-node-b"}, 0),
        s(names.KSM_NODE_CAPACITY, {"node": "gpu-node-a"}, 8),
        s(names.KSM_NODE_ALLOCATABLE, {"node": "gpu-node-a"}, 8),
        s(names.KSM_NODE_UNSCHEDULABLE, {"node": "gpu-node-a"}, 0),
    ]
    if lost:
        samples.append(s(names.DCGM_XID_LAST, {"Hostname": "gpu-node-b", "gpu": "4"}, 79))
    return at, tuple(samples)


def test_replay_finds_the_xid79_once_and_counts_gaps() -> None:
    history: list[tuple[datetime, tuple[fleet.MetricSample, ...] | SourceError]] = [
        at_minute(m) for m in range(10)
    ]
    history[1] = (history[1][0], SourceError("no series for 'freshness dcgm-exporter'"))
    report = backtest.replay(history, Classifier(), settings.GuardSettings())
    assert [(i.node, i.at, i.fault) for i in report.isolations] == [
        ("gpu-node-b", T0 + 3 * STEP, "xid-79")
    ]
    assert report.isolations[0].reason is decisions.Reason.FAST_PATH
    assert report.instants == 10
    assert report.undecided == 1
    assert report.first_error is not None
    assert "freshness" in report.first_error


def storm_at(minute: int, nodes: int = 10) -> tuple[datetime, tuple[fleet.MetricSample, ...]]:
    """Ten nodes report Xid 79 and a lost GPU from minute 1, for the whole replay."""
    at = T0 + minute * STEP
    samples = []
    for i in range(nodes):
        name, lost = f"gpu-node-{i}", minute >= 1
        samples += [
            fleet.MetricSample(names.KSM_NODE_CAPACITY, {"node": name}, 8, at),
            fleet.MetricSample(names.KSM_NODE_ALLOCATABLE, {"node": name}, 7 if lost else 8, at),
            fleet.MetricSample(names.KSM_NODE_UNSCHEDULABLE, {"node": name}, 0, at),
        ]
        if lost:
            labels = {"Hostname": name, "gpu": "0"}
            samples.append(fleet.MetricSample(names.DCGM_XID_LAST, labels, 79, at))
    return at, tuple(samples)


def test_a_storm_in_the_history_trips_once_and_the_trip_holds_through_the_replay() -> None:
    history: list[tuple[datetime, tuple[fleet.MetricSample, ...] | SourceError]] = [
        storm_at(m) for m in range(120)
    ]
    report = backtest.replay(history, Classifier(), settings.GuardSettings())
    assert [i.node for i in report.isolations] == ["gpu-node-0"]
    assert "breaker-tripped" in report.findings
