"""Backtest replays the policy over history: catches the Xid 79, never isolates twice,
counts instants without data instead of guessing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpuguard.controller import backtest
from gpuguard.errors import SourceError
from gpuguard.model import annotation_keys, decisions, fleet, settings
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


def gpu_fault_at(minute: int) -> tuple[datetime, tuple[fleet.MetricSample, ...]]:
    """gpu-node-b: a DBE on GPU 4, held from the start; GPU 6 falls off the bus at minute 5."""
    at = T0 + minute * STEP
    lost = 1 + (minute >= 5)

    def s(name: str, labels: dict[str, str], value: float) -> fleet.MetricSample:
        return fleet.MetricSample(name, labels, value, at)

    dcgm = {"Hostname": "gpu-node-b", "pci_bus_id": "00000000:99:00.0"}
    samples = [
        s(names.KSM_NODE_CAPACITY, {"node": "gpu-node-b"}, 8),
        s(names.KSM_NODE_ALLOCATABLE, {"node": "gpu-node-b"}, 8 - lost),
        s(names.KSM_NODE_UNSCHEDULABLE, {"node": "gpu-node-b"}, 0),
        s(names.GPU_LOSS_HELD, {"node": "gpu-node-b"}, 1),
        s(names.DCGM_XID_LAST, dcgm | {"gpu": "4", "UUID": "GPU-card-4"}, 48),
    ]
    if minute >= 5:
        samples.append(s(names.DCGM_XID_LAST, {"Hostname": "gpu-node-b", "gpu": "6"}, 79))
    return at, tuple(samples)


def test_a_replayed_gpu_isolation_leaves_the_node_serving_for_the_rest_of_the_replay() -> None:
    report = backtest.replay(
        [gpu_fault_at(m) for m in range(8)], Classifier(), settings.GuardSettings()
    )
    assert [(i.at, i.fault, i.reason) for i in report.isolations] == [
        (T0, "xid-48 (GPU 4)", decisions.Reason.HARDWARE_XID_WITH_GPU_LOSS),
        (T0 + 5 * STEP, "xid-79", decisions.Reason.FAST_PATH),
    ]


def held_loss_at(
    minute: int, *, cordon_mark: bool
) -> tuple[datetime, tuple[fleet.MetricSample, ...]]:
    """gpu-node-b loses a GPU to an Xid 48 at minute 1 (isolated once the loss is held for the
    hold window); the live guard cordoned it at minute 11, so the history shows the cordon —
    with gpuguard's mark on kube_node_annotations, or without it (a person's cordon)."""
    at, lost, cordoned = T0 + minute * STEP, minute >= 1, minute >= 11
    node = {"node": "gpu-node-b"}
    mark = {names.ksm_annotation_label(annotation_keys.ISOLATED_AT): "2026-09-21T06:01:00Z"}
    samples = [
        fleet.MetricSample(names.KSM_NODE_CAPACITY, node, 8, at),
        fleet.MetricSample(names.KSM_NODE_ALLOCATABLE, node, 7 if lost else 8, at),
        fleet.MetricSample(names.KSM_NODE_UNSCHEDULABLE, node, 1 if cordoned else 0, at),
        fleet.MetricSample(names.GPU_LOSS_HELD, node, 1 if minute >= 11 else 0, at),
    ]
    if cordoned and cordon_mark:
        samples.append(fleet.MetricSample(names.KSM_NODE_ANNOTATIONS, node | mark, 1, at))
    if lost:
        labels = {"Hostname": "gpu-node-b", "gpu": "4"}
        samples.append(fleet.MetricSample(names.DCGM_XID_LAST, labels, 48, at))
    return at, tuple(samples)


def test_the_live_guards_own_cordon_in_the_history_is_replayed_not_taken_for_a_persons() -> None:
    ours = [held_loss_at(m, cordon_mark=True) for m in range(15)]
    report = backtest.replay(ours, Classifier(), settings.GuardSettings())
    assert [(i.node, i.at) for i in report.isolations] == [("gpu-node-b", T0 + 11 * STEP)]
    assert report.isolations[0].reason is decisions.Reason.HARDWARE_XID_WITH_GPU_LOSS
    persons = [held_loss_at(m, cordon_mark=False) for m in range(15)]
    assert backtest.replay(persons, Classifier(), settings.GuardSettings()).isolations == []


def test_nodes_keep_the_marks_people_wrote_and_not_the_guards() -> None:
    """A hold a person wrote (exported by kube-state-metrics) is the node's in the replay, so
    the breaker does not count the node; gpuguard's own marks are the replay's to decide."""
    labels = {
        "node": "gpu-node-a",
        names.ksm_annotation_label(annotation_keys.HOLD): "card on order",
        names.ksm_annotation_label(annotation_keys.REASON): "xid-79",
    }
    sample = fleet.MetricSample(names.KSM_NODE_ANNOTATIONS, labels, 1, T0)
    capacity = fleet.MetricSample(names.KSM_NODE_CAPACITY, {"node": "gpu-node-a"}, 8, T0)
    node = backtest.nodes_at([sample, capacity])["gpu-node-a"]
    assert node.annotations == {annotation_keys.HOLD: "card on order"}
