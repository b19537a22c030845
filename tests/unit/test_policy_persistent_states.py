"""The agent's persistent-state conditions as isolation signals (docs/xid-events.md#
persistent-states): a fatal NVSwitch SXid or a failed fabric registration isolates the node
once held through the hold window, the GPUs still allocatable; the driver's recovery action is
the Xid 154 of the GPUs it names, isolated as any hardware Xid with GPU loss."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpuguard.model import annotation_keys, decisions, faults, fleet, settings, withheld
from gpuguard.model import metric_names as names
from gpuguard.model import node_conditions as nc
from gpuguard.policy import fault_history, isolate, xid_signals

NOW = datetime(2026, 12, 4, 1, 0, tzinfo=UTC)
PCI = "0000:99:00.0"
Reason = decisions.Reason


class Classifier:
    def is_hardware(self, code: int) -> bool:
        return code not in {13, 31, 43, 45, 68, 109}

    def is_hardware_event(self, code: int, rule: str) -> bool:
        return self.is_hardware(code)


def fabric(reason: str = nc.FATAL_SXID, status: str = "True", held: timedelta = timedelta(
        minutes=11)) -> nc.GpuCondition:
    message = "nvswitch=0000:a9:00.0 sxid=20034; fatal NVSwitch SXid(s) this boot"
    return nc.GpuCondition(nc.GPU_FABRIC_FAULT, status, reason, message, NOW - held)


def recovery(status: str = "True") -> nc.GpuCondition:
    message = f"gpu=4 pci={PCI} xid=154; nvidia-smi gpu_recovery_action: GPU Reset"
    return nc.GpuCondition(nc.GPU_RECOVERY_REQUIRED, status, nc.DRIVER_ASKS_RECOVERY, message,
                           NOW - timedelta(minutes=20))


def node(*conditions: nc.GpuCondition, allocatable: int = 8) -> fleet.Node:
    return fleet.Node(name="hgx-1", boot_id="boot-1", gpu_capacity=8,
                      gpu_allocatable=allocatable, conditions={"Ready": "True"},
                      gpu_conditions={c.type: c for c in conditions})


def decide(n: fleet.Node, samples: tuple[fleet.MetricSample, ...] = ()
           ) -> isolate.IsolationDecision:
    snap = fleet.FleetSnapshot(taken_at=NOW, nodes=(n,), samples=samples)
    return isolate.decide(snap, Classifier(), settings.GuardSettings())


HELD_LOSS = fleet.MetricSample(names.GPU_LOSS_HELD, {"node": "hgx-1"}, 1.0, NOW)


@pytest.mark.parametrize(
    ("condition", "label"),
    [
        pytest.param(fabric(), "sxid-20034", id="fatal-sxid-isolates-the-node"),
        pytest.param(fabric(nc.FABRIC_NOT_REGISTERED), xid_signals.FABRIC_REGISTRATION,
                     id="fabric-manager-down-isolates-the-node"),
    ],
)
def test_a_held_fabric_fault_isolates_the_node_with_its_gpus_allocatable(
    condition: nc.GpuCondition, label: str
) -> None:
    (action,) = decide(node(condition)).actions
    assert (action.kind, action.reason) == (decisions.ActionKind.ISOLATE, Reason.FABRIC_FAULT_HELD)
    assert action.annotations[annotation_keys.REASON] == label
    assert "fabric-fault" in action.detail  # node scope: the fault spans GPUs


@pytest.mark.parametrize(
    "condition",
    [
        pytest.param(fabric(held=timedelta(minutes=3)), id="not-held-yet"),
        pytest.param(fabric(status="False", reason="NoFabricFault"), id="no-fabric-fault"),
        pytest.param(fabric(reason="SomethingElse"), id="other-reason-is-no-signal"),
    ],
)
def test_a_fabric_fault_not_held_or_not_a_fault_isolates_nothing(
    condition: nc.GpuCondition,
) -> None:
    decision = decide(node(condition))
    assert decision.actions == ()


def test_a_fabric_fault_still_holding_is_a_finding() -> None:
    (finding,) = decide(node(fabric(held=timedelta(minutes=3)))).findings
    assert (finding.reason, finding.detail) == (Reason.HARDWARE_XID_HOLDING, "sxid-20034")


def test_the_drivers_recovery_action_with_gpu_loss_isolates_as_xid_154() -> None:
    (action,) = decide(node(recovery(), allocatable=7), (HELD_LOSS,)).actions
    assert action.reason is Reason.HARDWARE_XID_WITH_GPU_LOSS
    assert "xid-154" in action.detail
    assert "DriverAsksRecovery" in " ".join(e.value for e in action.evidence)


def test_the_drivers_recovery_action_without_gpu_loss_is_a_finding() -> None:
    decision = decide(node(recovery()))
    assert decision.actions == ()
    assert [f.reason for f in decision.findings] == [Reason.HARDWARE_XID_WITHOUT_GPU_LOSS]


def test_a_recovery_action_the_agent_counted_too_is_one_signal() -> None:
    labels = {"node": "hgx-1", "gpu": "4", "uuid": "", "pci": PCI, "xid": "154"}
    counted = fleet.MetricSample(names.XID_TOTAL_RECENT, labels, 1.0, NOW)
    snap = fleet.FleetSnapshot(taken_at=NOW, nodes=(node(recovery()),), samples=(counted,))
    (signal,) = xid_signals.all_signals(snap, Classifier())["hgx-1"]
    assert signal.source is xid_signals.XidSource.AGENT


def ledger_lines(n: fleet.Node) -> tuple[faults.LedgerEntry, ...]:
    snap = fleet.FleetSnapshot(taken_at=NOW, nodes=(n,), samples=())
    signals = xid_signals.all_signals(snap, Classifier())
    return fault_history.record(signals, None, (n,), [], tripped=False, now=NOW,
                                lookback=timedelta(hours=1)).entries


def test_a_recovery_action_is_a_ledger_line_the_kernel_log_never_confirmed() -> None:
    (line,) = ledger_lines(node(recovery(), allocatable=7))
    assert (line.xid, line.pci) == (154, PCI)
    assert line.confirmation is faults.Confirmation.DEVICE_PLUGIN
    (unconfirmed,) = ledger_lines(node(recovery()))
    assert unconfirmed.confirmation is faults.Confirmation.OBSERVED


def test_a_fabric_fault_names_no_card_and_writes_no_ledger_line() -> None:
    assert ledger_lines(node(fabric())) == ()


def test_a_withheld_fabric_fault_whose_condition_cleared_is_not_pending() -> None:
    mark = withheld.WithheldMark(Reason.BREAKER_RATE, NOW - timedelta(hours=1), "sxid-20034",
                                 "?", "", "")
    held = fleet.Node(name="hgx-1", boot_id="boot-1", gpu_capacity=8, gpu_allocatable=7,
                      conditions={"Ready": "True"},
                      annotations={withheld.KEY: mark.to_annotation()})
    assert decide(held, (HELD_LOSS,)).actions == ()  # a lost GPU alone is no fabric fault
