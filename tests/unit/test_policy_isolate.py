"""The isolation policy, table-driven with the seed's incidents and false-positive cases."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpuguard.model import annotation_keys, decisions, fleet, settings
from gpuguard.model import metric_names as names
from gpuguard.policy import isolate

NOW = datetime(2026, 9, 21, 5, 53, 30, tzinfo=UTC)
USER_XIDS = frozenset({13, 31, 43, 45, 68, 109})
Reason = decisions.Reason


class Classifier:
    def is_hardware(self, code: int) -> bool:
        return code not in USER_XIDS


def node(
    name: str,
    *,
    capacity: int = 8,
    allocatable: int = 8,
    cordoned: bool = False,
    marks: dict[str, str] | None = None,
) -> fleet.Node:
    return fleet.Node(
        name=name,
        boot_id=f"boot-{name}",
        gpu_capacity=capacity,
        gpu_allocatable=allocatable,
        unschedulable=cordoned,
        annotations=marks or {},
        conditions={"Ready": "True"},
    )


def gauge(node_name: str, value: int, *, gpu: str = "4", ago: bool = False) -> fleet.MetricSample:
    labels = {"Hostname": node_name, "gpu": gpu, "UUID": f"GPU-{node_name}-{gpu}"}
    labels |= {"pci_bus_id": "00000000:99:00.0", "err_code": str(value)}
    name = names.XID_LAST_24H_AGO if ago else names.DCGM_XID_LAST
    return fleet.MetricSample(name, labels, float(value), NOW - timedelta(seconds=10))


def agent_xids(node_name: str, xid: int, count: float = 1.0) -> fleet.MetricSample:
    labels = {"node": node_name, "gpu": "4", "uuid": "GPU-1a2b", "pci": "0000:99:00.0"}
    return fleet.MetricSample(names.XID_TOTAL_RECENT, labels | {"xid": str(xid)}, count, NOW)


def held(node_name: str, value: float) -> fleet.MetricSample:
    return fleet.MetricSample(names.GPU_LOSS_HELD, {"node": node_name}, value, NOW)


def snapshot(nodes: list[fleet.Node], samples: list[fleet.MetricSample]) -> fleet.FleetSnapshot:
    return fleet.FleetSnapshot(taken_at=NOW, nodes=tuple(nodes), samples=tuple(samples))


def decide(
    nodes: list[fleet.Node],
    samples: list[fleet.MetricSample],
    guard: settings.GuardSettings | None = None,
) -> isolate.IsolationDecision:
    return isolate.decide(snapshot(nodes, samples), Classifier(), guard or NODE_ONLY)


NODE_ONLY = settings.GuardSettings.model_validate({"gpu_isolation": {"enabled": False}})
"""This table is about *when* to isolate; GPU or node is tests/unit/test_policy_gpu_scope.py."""


ISOLATED_MARKS = {annotation_keys.ISOLATED_AT: "2026-09-10T13:04:00Z"}

CASES = [
    pytest.param(
        [node("gpu-node-b", allocatable=7), node("gpu-node-a")],
        [gauge("gpu-node-b", 79)],
        {"gpu-node-b": Reason.FAST_PATH},
        id="xid79-gpu-gone-isolates-on-first-tick",
    ),
    pytest.param(
        [node("gpu-node-b", allocatable=7)],
        [agent_xids("gpu-node-b", 79, 2.0)],
        {"gpu-node-b": Reason.FAST_PATH},
        id="same-card-second-xid79-isolates-again-agent-counter",
    ),
    pytest.param(
        [node("gpu-node-b", allocatable=7)],
        [gauge("gpu-node-b", 79), gauge("gpu-node-b", 13, ago=True)],
        {"gpu-node-b": Reason.FAST_PATH},
        id="user-xid13-yesterday-then-xid79-today-isolates",
    ),
    pytest.param(
        [node("gpu-node-b", allocatable=7)],
        [gauge("gpu-node-b", 79), gauge("gpu-node-b", 79, ago=True)],
        {},
        id="xid79-yesterday-and-still-79-is-not-new",
    ),
    pytest.param(
        [node("gpu-node-a", allocatable=7)],
        [gauge("gpu-node-a", 48), held("gpu-node-a", 1)],
        {"gpu-node-a": Reason.HARDWARE_XID_WITH_GPU_LOSS},
        id="xid48-with-loss-held-through-window-isolates",
    ),
    pytest.param(
        [node("gpu-node-a", allocatable=7)],
        [gauge("gpu-node-a", 48), held("gpu-node-a", 0)],
        {},
        id="xid48-loss-not-yet-held-waits",
    ),
    pytest.param(
        [node("gpu-node-a", allocatable=7)],
        [gauge("gpu-node-a", 48)],
        {},
        id="hold-window-series-missing-never-isolates",
    ),
    pytest.param(
        [node("gpu-node-c", allocatable=0)],
        [held("gpu-node-c", 8)],
        {},
        id="driver-upgrade-dip-without-xid-does-not-isolate",
    ),
    pytest.param(
        [node("gpu-node-c", allocatable=6)],
        [gauge("gpu-node-c", 13), gauge("gpu-node-c", 31, gpu="1"), held("gpu-node-c", 2)],
        {},
        id="user-xid-storm-with-mig-dip-does-not-isolate",
    ),
    pytest.param(
        [node("gpu-node-b", allocatable=7, cordoned=True)],
        [gauge("gpu-node-b", 79)],
        {},
        id="human-cordon-untouched",
    ),
    pytest.param(
        [node("gpu-node-b", allocatable=7, cordoned=True, marks=ISOLATED_MARKS)],
        [gauge("gpu-node-b", 79)],
        {},
        id="already-isolated-not-isolated-twice",
    ),
    pytest.param(
        [node("gpu-node-b", allocatable=8)],
        [gauge("gpu-node-b", 79)],
        {},
        id="xid79-without-gpu-loss-is-a-finding-only",
    ),
]


@pytest.mark.parametrize(("nodes", "samples", "expected"), CASES)
def test_isolation_decisions(
    nodes: list[fleet.Node], samples: list[fleet.MetricSample], expected: dict[str, Reason]
) -> None:
    decision = decide(nodes, samples)
    assert {a.node: a.reason for a in decision.actions} == expected
    assert all(a.kind is decisions.ActionKind.ISOLATE for a in decision.actions)


@pytest.mark.parametrize(
    ("nodes", "samples", "reason"),
    [
        pytest.param(
            [node("n", allocatable=7)], [held("n", 1)], Reason.GPU_LOSS_WITHOUT_XID, id="loss"
        ),
        pytest.param(
            [node("n", allocatable=7, cordoned=True)],
            [gauge("n", 79)],
            Reason.HUMAN_CORDON,
            id="human-cordon",
        ),
        pytest.param(
            [node("n")], [gauge("n", 94)], Reason.HARDWARE_XID_WITHOUT_GPU_LOSS, id="no-loss"
        ),
        pytest.param(
            [node("n", allocatable=7)], [gauge("n", 48)], Reason.HARDWARE_XID_HOLDING, id="hold"
        ),
    ],
)
def test_nodes_left_alone_get_a_finding_with_evidence(
    nodes: list[fleet.Node], samples: list[fleet.MetricSample], reason: Reason
) -> None:
    decision = decide(nodes, samples)
    assert not decision.actions
    assert [f.reason for f in decision.findings] == [reason]
    assert decision.findings[0].evidence


def test_isolation_patch_carries_the_seed_annotations_and_evidence() -> None:
    decision = decide([node("gpu-node-b", allocatable=7)], [gauge("gpu-node-b", 79)])
    (action,) = decision.actions
    assert action.annotations == {
        annotation_keys.REASON: "xid-79",
        annotation_keys.ISOLATED_AT: "2026-09-21T05:53:30Z",
        annotation_keys.BOOT_ID: "boot-gpu-node-b",
        annotation_keys.GPU_CAPACITY: "8",
        annotation_keys.GPU_UUID: "GPU-gpu-node-b-4",
        annotation_keys.GPU_PCI: "00000000:99:00.0",
    }
    sources = [e.source for e in action.evidence]
    assert names.DCGM_XID_LAST in sources
    assert any("capacity/allocatable" in s for s in sources)


def test_at_most_one_isolation_per_tick_by_default() -> None:
    nodes = [node(f"gpu-node-{i}", allocatable=7) for i in range(2)]
    samples = [gauge(n.name, 79) for n in nodes]
    many = [node(f"spare-{i}") for i in range(30)]
    decision = decide(nodes + many, samples)
    assert [a.node for a in decision.actions] == ["gpu-node-0"]
    withheld = [f for f in decision.findings if f.reason is Reason.TICK_LIMIT]
    assert [f.node for f in withheld] == ["gpu-node-1"]
    assert not decision.markings  # the per-tick limit is no breaker: nothing marked
    assert decision.fast_path_left == ("gpu-node-1",)  # the loop ticks again for it


def test_only_fast_path_faults_left_to_the_per_tick_limit_ask_for_another_tick_now() -> None:
    nodes = [node(f"gpu-node-{i}", allocatable=7) for i in range(2)]
    samples = [s for n in nodes for s in (gauge(n.name, 48), held(n.name, 1))]
    decision = decide(nodes + [node(f"spare-{i}") for i in range(30)], samples)
    assert [a.node for a in decision.actions] == ["gpu-node-0"]
    assert [f.node for f in decision.findings if f.reason is Reason.TICK_LIMIT] == ["gpu-node-1"]
    assert decision.fast_path_left == ()  # a held fault waits for the periodic tick


def test_breaker_level_withholds_and_marks_the_fault_pending() -> None:
    isolated = [
        node(f"old-{i}", allocatable=7, cordoned=True, marks=ISOLATED_MARKS) for i in range(5)
    ]
    healthy = [node(f"ok-{i}") for i in range(95)]
    faulty = node("gpu-node-b", allocatable=7)
    decision = decide([*isolated, *healthy, faulty], [gauge("gpu-node-b", 79)])
    assert decision.breaker.open
    assert not decision.actions
    (blocked,) = [f for f in decision.findings if f.node == "gpu-node-b"]
    assert blocked.reason is Reason.BREAKER_LEVEL
    assert any(e.source == "breaker" and "OPEN" in e.value for e in blocked.evidence)
    (marking,) = decision.markings
    assert marking.node == "gpu-node-b"
    assert marking.value is not None
    assert decision.withheld["gpu-node-b"].fault == "xid-79"


def test_confirmed_isolations_never_stop_the_guard() -> None:
    confirmed = ISOLATED_MARKS | {annotation_keys.VERDICT: "power-cycle"}
    waiting = [node(f"old-{i}", allocatable=7, cordoned=True, marks=confirmed) for i in range(5)]
    decision = decide(
        [*waiting, node("ok"), node("gpu-node-b", allocatable=7)], [gauge("gpu-node-b", 79)]
    )
    assert [a.node for a in decision.actions] == ["gpu-node-b"]


def test_fast_path_can_be_turned_off_per_xid() -> None:
    guard = settings.GuardSettings(isolation=settings.IsolationSettings(fast_path_xids=frozenset()))
    decision = decide([node("gpu-node-b", allocatable=7)], [gauge("gpu-node-b", 79)], guard)
    assert not decision.actions
    assert decision.findings[0].reason is Reason.HARDWARE_XID_HOLDING


def test_kernel_fallen_off_bus_takes_the_fast_path() -> None:
    sample = fleet.MetricSample(
        names.FALLEN_OFF_BUS_RECENT, {"node": "gpu-node-b", "pci": "0000:99:00.0"}, 1.0, NOW
    )
    decision = decide([node("gpu-node-b", allocatable=7)], [sample])
    (action,) = decision.actions
    assert action.annotations[annotation_keys.REASON] == "fallen-off-bus"


def test_xid79_and_the_kernels_fallen_off_bus_on_one_gpu_are_named_xid79_with_both_as_evidence(
) -> None:
    # Both from the agent, as on a node whose driver logged Xid 79 and "fallen off the bus"
    # for GPU 4: the reason is the catalogue's code, the kernel message is its evidence.
    fallen = fleet.MetricSample(
        names.FALLEN_OFF_BUS_RECENT,
        {"node": "gpu-node-b", "gpu": "4", "uuid": "GPU-1a2b", "pci": "0000:99:00.0"},
        1.0,
        NOW,
    )
    decision = decide([node("gpu-node-b", allocatable=7)], [fallen, agent_xids("gpu-node-b", 79)])
    (action,) = decision.actions
    assert action.annotations[annotation_keys.REASON] == "xid-79"
    sources = [e.source for e in action.evidence]
    assert names.XID_TOTAL_RECENT in sources
    assert names.FALLEN_OFF_BUS_RECENT in sources
