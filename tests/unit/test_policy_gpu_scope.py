"""GPU or node: the decision table (policy.gpu_scope), the GPU isolation action it leads to
(policy.isolate) and how the breaker counts GPU isolations (policy.admission)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from gpuguard.model import annotation_keys, decisions, faults, fleet, gpu_isolation, settings
from gpuguard.model import metric_names as names
from gpuguard.policy import admission, gpu_scope, isolate, xid_signals

NOW = datetime(2026, 8, 10, 15, 46, tzinfo=UTC)
Reason = decisions.Reason
Scope = gpu_isolation.Scope
DEFAULTS = settings.GuardSettings()
PCI = "0000:2a:00.0"


def node(
    *, capacity: int = 4, allocatable: int = 3, marks: dict[str, str] | None = None
) -> fleet.Node:
    return fleet.Node("gpu-node-a", "boot-1", capacity, allocatable, annotations=marks or {},
                      conditions={"Ready": "True"})


def fault(xid: int | None = 48, *, gpu: str = "1", uuid: str | None = "GPU-card-1",
          pci: str | None = PCI) -> xid_signals.HardwareXid:
    evidence = decisions.Evidence("test", str(xid))
    return xid_signals.HardwareXid("gpu-node-a", gpu, xid, xid_signals.XidSource.AGENT, evidence,
                                   uuid=uuid, pci=pci)


def line(days_ago: float, xid: int = 48, pci: str = PCI) -> faults.LedgerEntry:
    return faults.LedgerEntry(
        at=NOW - timedelta(days=days_ago), node="gpu-node-a", xid=xid, pci=pci,
        uuid="GPU-card-1", recorder=faults.Recorder.GPUGUARD,
        confirmation=faults.Confirmation.DEVICE_PLUGIN,
    )


OFF = settings.GuardSettings.model_validate({"gpu_isolation": {"enabled": False}})

CASES = [
    pytest.param(fault(48), [], node(), [], DEFAULTS, Scope.GPU, Reason.GPU_SCOPED_FAULT,
                 id="one-dbe-on-a-sound-node-isolates-the-gpu"),
    *(
        pytest.param(fault(x), [], node(), [], DEFAULTS, Scope.GPU, Reason.GPU_SCOPED_FAULT,
                     id=f"xid{x}-belongs-to-the-card")
        for x in (63, 64, 94, 95)
    ),
    pytest.param(fault(48), [], node(), [], OFF, Scope.NODE, Reason.GPU_ISOLATION_OFF,
                 id="switched-off-cordons-the-node"),
    pytest.param(fault(79), [], node(), [], DEFAULTS, Scope.NODE, Reason.NEEDS_POWER_CYCLE,
                 id="xid79-needs-a-power-cycle"),
    pytest.param(fault(None), [], node(), [], DEFAULTS, Scope.NODE, Reason.NEEDS_POWER_CYCLE,
                 id="fallen-off-the-bus-needs-a-power-cycle"),
    pytest.param(fault(74), [], node(), [], DEFAULTS, Scope.NODE, Reason.FABRIC_FAULT,
                 id="nvlink-fault-spans-gpus"),
    pytest.param(fault(48), [fault(48, gpu="2", uuid="GPU-card-2", pci="0000:3a:00.0")],
                 node(allocatable=2), [], DEFAULTS, Scope.NODE, Reason.SEVERAL_GPUS,
                 id="two-cards-faulty-isolates-the-node"),
    pytest.param(fault(48), [], node(allocatable=2), [], DEFAULTS, Scope.NODE, Reason.SEVERAL_GPUS,
                 id="more-gpus-gone-than-the-faulty-card"),
    pytest.param(fault(119), [], node(), [], DEFAULTS, Scope.NODE, Reason.NODE_SCOPED_XID,
                 id="gsp-timeout-is-not-a-per-card-xid"),
    pytest.param(fault(48, uuid=None), [], node(), [], DEFAULTS, Scope.NODE,
                 Reason.GPU_UNIDENTIFIED, id="a-card-without-uuid-cannot-be-singled-out"),
    pytest.param(fault(48), [], node(), [line(30), line(10)], DEFAULTS, Scope.NODE,
                 Reason.SLOT_REPEATS, id="third-fault-in-the-slot-isolates-the-node"),
    pytest.param(fault(48), [], node(), [line(30), line(0.01)], DEFAULTS, Scope.GPU,
                 Reason.GPU_SCOPED_FAULT, id="this-faults-own-ledger-line-is-not-a-second"),
    pytest.param(fault(48), [], node(), None, DEFAULTS, Scope.NODE, Reason.SLOT_HISTORY_UNKNOWN,
                 id="unreadable-ledger-isolates-the-node"),
    pytest.param(fault(48), [], node(capacity=1, allocatable=0), [], DEFAULTS, Scope.NODE,
                 Reason.NO_GPU_LEFT, id="the-last-gpu-isolates-the-node"),
]


@pytest.mark.parametrize(
    ("current", "others", "the_node", "ledger", "config", "scope", "reason"), CASES
)
def test_gpu_or_node(
    current: xid_signals.HardwareXid,
    others: list[xid_signals.HardwareXid],
    the_node: fleet.Node,
    ledger: list[faults.LedgerEntry] | None,
    config: settings.GuardSettings,
    scope: Scope,
    reason: Reason,
) -> None:
    decision = gpu_scope.decide(current, [current, *others], the_node, ledger, config, NOW)
    assert (decision.scope, decision.reason) == (scope, reason)
    assert decision.detail
    assert decision.evidence


class Classifier:
    def is_hardware(self, code: int) -> bool:
        return code not in {13, 31, 43, 45, 68, 109}


def _samples(xid: int) -> tuple[fleet.MetricSample, ...]:
    labels = {"node": "gpu-node-a", "gpu": "1", "uuid": "GPU-card-1", "pci": PCI, "xid": str(xid)}
    return (
        fleet.MetricSample(names.XID_TOTAL_RECENT, labels, 1.0, NOW),
        fleet.MetricSample(names.GPU_LOSS_HELD, {"node": "gpu-node-a"}, 1.0, NOW),
    )


def _decide(the_node: fleet.Node, xid: int = 48) -> isolate.IsolationDecision:
    snapshot = fleet.FleetSnapshot(NOW, nodes=(the_node,), samples=_samples(xid))
    return isolate.decide(snapshot, Classifier(), DEFAULTS)


def test_a_gpu_fault_marks_the_gpu_and_never_cordons() -> None:
    (action,) = _decide(node()).actions
    assert action.kind is decisions.ActionKind.ISOLATE_GPU
    assert set(action.annotations) == {annotation_keys.GPU_ISOLATED}
    (entry,) = json.loads(action.annotations[annotation_keys.GPU_ISOLATED])
    assert entry["uuid"] == "GPU-card-1"
    assert entry["pci"] == PCI
    assert entry["index"] == "1"
    assert entry["mechanism"] == "compute-prohibited+device-plugin"
    assert entry["capacity"] == 4


def test_xid79_still_cordons_the_node() -> None:
    (action,) = _decide(node(), xid=79).actions
    assert action.kind is decisions.ActionKind.ISOLATE
    assert "needs-power-cycle" in action.detail


def _isolated(entry_at: datetime = NOW, *, confirmed: bool = False, capacity: int = 4,
              allocatable: int = 3) -> fleet.Node:
    entry = gpu_isolation.IsolatedGpu("GPU-card-1", PCI, "1", entry_at, "xid-48", capacity=4,
                                      applied_boot="boot-1", confirmed=confirmed)
    value = gpu_isolation.to_annotation((entry,)) or ""
    return node(capacity=capacity, allocatable=allocatable,
                marks={annotation_keys.GPU_ISOLATED: value})


@pytest.mark.parametrize(("capacity", "allocatable"), [(4, 3), (3, 3), (4, 4)])
def test_an_isolated_gpus_later_faults_change_nothing(capacity: int, allocatable: int) -> None:
    """Still marked unhealthy, excluded, or re-advertised after a plugin restart: its
    repeated DBEs are neither a new GPU isolation nor a node isolation."""
    decision = _decide(_isolated(capacity=capacity, allocatable=allocatable))
    assert decision.actions == ()


def test_another_card_failing_beside_an_isolated_one_is_judged_on_its_own() -> None:
    the_node = _isolated(capacity=3, allocatable=2)
    labels = {"node": "gpu-node-a", "gpu": "2", "uuid": "GPU-card-2", "pci": "0000:3a:00.0",
              "xid": "48"}
    samples = (*_samples(48), fleet.MetricSample(names.XID_TOTAL_RECENT, labels, 1.0, NOW))
    snapshot = fleet.FleetSnapshot(NOW, nodes=(the_node,), samples=samples)
    (action,) = isolate.decide(snapshot, Classifier(), DEFAULTS).actions
    entries = json.loads(action.annotations[annotation_keys.GPU_ISOLATED])
    assert [e["uuid"] for e in entries] == ["GPU-card-1", "GPU-card-2"]


@pytest.mark.parametrize(
    ("confirmed", "hold", "counted"),
    [(False, False, 1), (True, False, 0), (False, True, 0)],
)
def test_the_breaker_counts_an_unconfirmed_gpu_isolation(
    confirmed: bool, hold: bool, counted: int
) -> None:
    the_node = _isolated(confirmed=confirmed)
    if hold:
        the_node = fleet.Node(the_node.name, the_node.boot_id, 4, 3,
                              annotations={**the_node.annotations, annotation_keys.HOLD: "ops"})
    (record,) = admission.history([the_node])
    state = admission.admit([], [record], None, 4, DEFAULTS.isolation, NOW)
    assert state.state.unconfirmed == counted
    assert state.state.recent_unconfirmed == counted


def pod_held(namespace: str, pod: str, uuid: str = "GPU-card-1") -> fleet.MetricSample:
    labels = {"node": "gpu-node-a", "uuid": uuid, "namespace": namespace, "pod": pod,
              "container": "main"}
    return fleet.MetricSample(names.GPU_POD, labels, 1.0, NOW)


@pytest.mark.parametrize(("kubelet", "said"), [
    ((), "pods on it (dcgm-exporter): ml/train-0: left running, not evicted"),
    ((pod_held("ml", "train-0"), pod_held("ml", "train-1"), pod_held("x", "y", "GPU-other")),
     "pods on it (kubelet PodResources): ml/train-0, ml/train-1: left running, not evicted"),
], ids=["dcgm-labels", "kubelet-pod-resources"])
def test_the_pods_on_the_isolated_gpu_are_reported_not_evicted(
    kubelet: tuple[fleet.MetricSample, ...], said: str
) -> None:
    labels = {"Hostname": "gpu-node-a", "gpu": "1", "UUID": "GPU-card-1",
              "pci_bus_id": "00000000:2A:00.0", "namespace": "ml", "pod": "train-0"}
    samples = (
        fleet.MetricSample(names.DCGM_XID_LAST, labels, 94.0, NOW),
        fleet.MetricSample(names.GPU_LOSS_HELD, {"node": "gpu-node-a"}, 1.0, NOW),
        *kubelet,
    )
    snapshot = fleet.FleetSnapshot(NOW, nodes=(node(),), samples=samples)
    (action,) = isolate.decide(snapshot, Classifier(), DEFAULTS).actions
    assert action.kind is decisions.ActionKind.ISOLATE_GPU
    assert said in action.detail
    (entry,) = json.loads(action.annotations[annotation_keys.GPU_ISOLATED])
    assert entry["pci"] == PCI  # dcgm-exporter's spelling, normalised
