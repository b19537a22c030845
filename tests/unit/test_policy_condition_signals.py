"""The agent's GpuFallenOffBus/GpuGoneFromBus condition isolates on the fast path before the
kubelet lowers allocatable; nothing else about isolation changes, and a fault seen by the
condition and then by Prometheus is one fault in the card's history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpuguard.model import annotation_keys, decisions, faults, fleet, settings
from gpuguard.model import metric_names as names
from gpuguard.model import node_conditions as nc
from gpuguard.policy import fault_history, isolate, xid_signals
from tests.builders import Classifier

NOW = datetime(2026, 12, 1, 23, 0, 1, tzinfo=UTC)
FELL = NOW - timedelta(seconds=1)
UUID = "GPU-3d1e2f7a-1b2c-4d5e-8f90-123456789abc"
PCI = "0000:99:00.0"
Reason = decisions.Reason
NODE_ONLY = settings.GuardSettings.model_validate({"gpu_isolation": {"enabled": False}})


def fallen(reason: str = nc.GONE_FROM_BUS, status: str = "True",
           gpus: tuple[nc.GpuNamed, ...] = (nc.GpuNamed("4", PCI, UUID, 79),)) -> nc.GpuCondition:
    text = nc.message(gpus, "the kernel said the GPU fell off the bus")
    return nc.GpuCondition(nc.GPU_FALLEN_OFF_BUS, status, reason, text, FELL)


def node(name: str = "gpu-node-b", *, condition: nc.GpuCondition | None = None,
         allocatable: int = 8, cordoned: bool = False,
         marks: dict[str, str] | None = None) -> fleet.Node:
    return fleet.Node(
        name, f"boot-{name}", 8, allocatable, unschedulable=cordoned,
        annotations=marks or {}, conditions={"Ready": "True"},
        gpu_conditions={} if condition is None else {condition.type: condition},
    )


def agent_sample(name: str, node_name: str = "gpu-node-b", *, xid: str | None = "79",
                 count: float = 1.0) -> fleet.MetricSample:
    labels = {"node": node_name, "gpu": "4", "uuid": UUID, "pci": PCI}
    return fleet.MetricSample(name, labels | ({"xid": xid} if xid else {}), count, NOW)


def decide(nodes: list[fleet.Node], samples: list[fleet.MetricSample] | None = None,
           guard: settings.GuardSettings = NODE_ONLY) -> isolate.IsolationDecision:
    snap = fleet.FleetSnapshot(taken_at=NOW, nodes=tuple(nodes), samples=tuple(samples or ()))
    return isolate.decide(snap, Classifier(), guard)


def test_gone_from_bus_isolates_before_allocatable_drops_quoting_the_condition() -> None:
    decision = decide([node(condition=fallen()), node("gpu-node-a")])
    (action,) = decision.actions
    assert (action.node, action.reason) == ("gpu-node-b", Reason.FAST_PATH)
    assert action.annotations[annotation_keys.REASON] == "xid-79"
    assert action.annotations[annotation_keys.GPU_UUID] == UUID
    quoted = action.evidence[0]
    assert quoted.source == "node/gpu-node-b condition GpuFallenOffBus"
    assert quoted.value.startswith("GpuGoneFromBus: gpu=4 pci=0000:99:00.0")
    assert quoted.at == FELL
    assert "before the kubelet's next status update" in action.evidence[-1].value


def test_a_condition_naming_no_xid_isolates_as_fallen_off_bus() -> None:
    decision = decide([node(condition=fallen(gpus=(nc.GpuNamed("4", PCI, UUID),)))])
    (action,) = decision.actions
    assert action.annotations[annotation_keys.REASON] == "fallen-off-bus"


def test_any_other_reason_or_status_never_isolates_by_itself() -> None:
    for condition in (fallen(reason="KernelSaidFallenOffBus"), fallen(status="False"),
                      fallen(status="Unknown"),
                      nc.GpuCondition(nc.GPU_HARDWARE_XID, "True", "HardwareXid",
                                      "gpu=4 xid=79; x", FELL)):
        decision = decide([node(condition=condition)])
        assert decision.actions == ()
        assert decision.findings == ()


def test_a_human_cordon_and_gpuguards_own_isolation_are_left_alone() -> None:
    cordoned = decide([node(condition=fallen(), cordoned=True)])
    assert cordoned.actions == ()
    assert [f.reason for f in cordoned.findings] == [Reason.HUMAN_CORDON]
    isolated = {annotation_keys.ISOLATED_AT: "2026-12-01T22:00:00Z"}
    assert decide([node(condition=fallen(), cordoned=True, marks=isolated)]).actions == ()


def test_the_breaker_still_holds_back_a_wave_of_conditions() -> None:
    gone = [node(f"gpu-node-{i}", condition=fallen()) for i in range(3)]
    decision = decide([*gone, *(node(f"gpu-node-x{i}") for i in range(20))])
    assert decision.breaker.tripped_now
    assert [a.node for a in decision.actions] == ["gpu-node-0"]
    assert [(f.node, f.reason) for f in decision.findings] == [
        ("gpu-node-1", Reason.BREAKER_TRIPPED), ("gpu-node-2", Reason.BREAKER_TRIPPED)]
    assert [m.node for m in decision.markings] == ["gpu-node-1", "gpu-node-2"]


def test_condition_and_prometheus_together_are_one_signal_named_by_prometheus() -> None:
    both = [agent_sample(names.XID_TOTAL_RECENT),
            agent_sample(names.FALLEN_OFF_BUS_RECENT, xid=None)]
    snap = fleet.FleetSnapshot(taken_at=NOW, nodes=(node(condition=fallen()),), samples=tuple(both))
    signals = xid_signals.all_signals(snap, Classifier())["gpu-node-b"]
    assert {s.source for s in signals} == {xid_signals.XidSource.AGENT}
    (action,) = decide([node(condition=fallen())], both).actions
    assert action.annotations[annotation_keys.REASON] == "xid-79"


def test_seen_by_condition_then_by_prometheus_is_one_fault_in_the_ledger() -> None:
    first_snap = fleet.FleetSnapshot(taken_at=NOW, nodes=(node(condition=fallen()),))
    first = fault_history.record(
        xid_signals.all_signals(first_snap, Classifier()), None, first_snap.nodes, [],
        tripped=False, now=NOW, lookback=timedelta(hours=24),
    )
    (entry,) = first.entries
    assert (entry.xid, entry.uuid, entry.confirmation) == (79, UUID,
                                                           faults.Confirmation.KERNEL_LOG)
    later = NOW + timedelta(seconds=30)
    scraped = (agent_sample(names.XID_TOTAL_RECENT),
               agent_sample(names.FALLEN_OFF_BUS_RECENT, xid=None))
    second_snap = fleet.FleetSnapshot(
        taken_at=later, nodes=(node(condition=fallen(), allocatable=7),), samples=scraped
    )
    second = fault_history.record(
        xid_signals.all_signals(second_snap, Classifier()), first.seen, second_snap.nodes,
        list(first.entries), tripped=False, now=later, lookback=timedelta(hours=24),
    )
    assert second.entries == ()
