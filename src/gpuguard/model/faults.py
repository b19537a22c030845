"""Faults and the fault ledger: one line per fault, counted by card (UUID) across nodes and by
slot (PCI) within a node, so a card's history follows it wherever it moves."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from gpuguard.model.decisions import Verdict


class FaultKind(StrEnum):
    XID = "xid"
    FALLEN_OFF_BUS = "fallen_off_bus"
    GPU_LOST = "gpu_lost"
    DBE = "dbe"
    ROW_REMAP_FAILURE = "row_remap_failure"
    BURNIN_FAILED = "burnin_failed"  # the burn-in after a repair failed (or hung)
    FABRIC = "fabric"  # a node-wide NVLink fabric fault (fatal NVSwitch SXid, failed registration)
    POWER_CYCLED = "power_cycled"  # gpuguard power-cycled the node (docs/remediation.md)
    POWER_CYCLE_FAILED = "power_cycle_failed"  # its BMC refused, failed or timed out
    GPU_RESET = "gpu_reset"  # gpuguard's reset Job reset the card (docs/remediation.md)
    GPU_RESET_FAILED = "gpu_reset_failed"  # that Job failed, hit its deadline or is gone


NOT_FAULTS = frozenset({FaultKind.BURNIN_FAILED, FaultKind.POWER_CYCLED,
                        FaultKind.POWER_CYCLE_FAILED, FaultKind.GPU_RESET,
                        FaultKind.GPU_RESET_FAILED})  # fmt: skip
"""Ledger lines about a card that are no fault of it: what happened after one (a failed
burn-in, gpuguard's power cycle and its result); escalation never counts them."""


# NVIDIA's Xid catalog: Xid 79 is "GPU has fallen off the bus", the code the driver logs with the
# kernel's "NVRM: GPU at PCI:... has fallen off the bus." message. One event, two signals: the
# ledger counts them as one occurrence (docs/design.md#isolation, the reason precedence).
FALLEN_OFF_BUS_XID = 79


def fault_identity(kind: FaultKind, xid: int | None) -> tuple[FaultKind, int | None]:
    """What makes two ledger lines the same fault: Xid 79 and "fallen off the bus" are one."""
    if kind is FaultKind.FALLEN_OFF_BUS or (kind is FaultKind.XID and xid == FALLEN_OFF_BUS_XID):
        return FaultKind.FALLEN_OFF_BUS, FALLEN_OFF_BUS_XID
    return kind, xid


class Recorder(StrEnum):
    GPUGUARD = "gpuguard"
    MANUAL = "manual"


class Confirmation(StrEnum):
    """How a ledger line's fault was established. Escalation (inspection, replacement, slot
    check) counts only confirmed faults, so a storm of bad metrics never escalates a healthy
    card; observed faults stay in the card's history for people to read.

    A line written before this column existed reads as confirmed: gpuguard wrote lines only
    with an evidence verdict, and people only for faults they saw."""

    EVIDENCE = "confirmed-by-evidence"  # the evidence Job found the fault (not human-diagnosis)
    DEVICE_PLUGIN = "confirmed-by-device-plugin"  # the GPU stopped being allocatable
    KERNEL_LOG = "confirmed-by-kernel-log"  # the kernel said the GPU fell off the bus
    # a card gpuguard holds out (GPU isolation) whose kernel log showed a hardware fault:
    # the device plugin no longer sees it, so its later faults cannot show as GPU loss
    ISOLATED_CARD = "confirmed-isolated-card"
    MANUAL = "confirmed-by-person"  # a person recorded it (``gpuguard ledger add``)
    OBSERVED = "observed"  # seen in metrics only: kept in the history, never escalates

    @property
    def confirmed(self) -> bool:
        return self is not Confirmation.OBSERVED


@dataclass(frozen=True, slots=True)
class Fault:
    """A confirmed or suspected fault on one GPU of one node."""

    node: str
    kind: FaultKind
    at: datetime
    xid: int | None = None
    pci: str | None = None
    uuid: str | None = None
    message: str = ""


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One line of the fault ledger (time in UTC)."""

    at: datetime
    node: str
    xid: int | None
    pci: str | None
    uuid: str | None
    recorder: Recorder
    verdict: Verdict | None = None
    kind: FaultKind = FaultKind.XID  # names the fault when there is no Xid code (xid is None)
    confirmation: Confirmation = Confirmation.EVIDENCE

    @property
    def confirmed(self) -> bool:
        return self.confirmation.confirmed
