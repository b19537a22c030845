"""The node conditions the agent reports on its own Node, computed from what it has seen.

Pure: the inputs are the agent's counts since this boot, what the GPUs' PCI config space reads,
the kernel log's problem and the last check results; the output is one ``GpuCondition`` per
type of ``model.node_conditions`` (docs/design.md#fast-path). Conditions are facts, not
decisions: the controller decides. ``GpuFallenOffBus`` says ``GpuGoneFromBus`` only when the
kernel said a GPU fell off the bus (Xid 79 or its message) *and* that GPU's config space now
reads all ones; with a card that still answers (or cannot be read) the reason is
``KernelSaidFallenOffBus``, which never isolates by itself. A condition keeps its
``last_transition`` while its status holds (``carry_transitions``).

``GpuRecoveryRequired`` and ``GpuFabricFault`` carry persistent states (docs/xid-events.md#
persistent-states): the driver's recovery action as the ``gpu-recovery`` check last read it
(a missed Xid 154 line is seen again), and a ``Fatal`` NVSwitch SXid line this boot or a GPU
whose fabric registration failed (``nvlink-fabric``). A ``Non-fatal`` SXid is counted, never a
fault: NVIDIA's Fabric Manager user guide ("NVSwitch SXid errors") says the switch corrected or
contained it, while a fatal one leaves the switch and its GPUs needing a reset.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from gpuguard.agent import counts as agent_counts
from gpuguard.agent.checks import gpu_state
from gpuguard.kernlog import messages
from gpuguard.model import decisions, faults
from gpuguard.model import node_conditions as nc
from gpuguard.policy import xid_signals

FELL_OFF_ANSWERS = "KernelSaidFallenOffBus"  # the kernel said so; the card still answers
ON_BUS = "GpusOnBus"
HARDWARE_XID = "HardwareXid"
NO_HARDWARE_XID = "NoHardwareXid"
MISMATCH = "NvmlDriverMismatch"
MATCH = "NvmlDriverMatch"
MISMATCH_UNKNOWN = "NvmlDriverUnknown"
UNREADABLE = "KernelLogUnreadable"
READABLE = "KernelLogReadable"
NO_RECOVERY = "NoRecoveryAction"
RECOVERY_UNKNOWN = "RecoveryActionUnknown"
NO_FABRIC_FAULT = "NoFabricFault"
FATAL = "Fatal"  # the driver's severity word on an SXid line (kernlog.messages.read_sxid)


@dataclass(frozen=True, slots=True)
class Seen:
    """What the agent knows now. ``counts`` and ``baseline`` are the tally's counts now and at
    this boot's start (``this_boot``: the rows grown since); ``config_all_ff`` maps a PCI address to
    whether its config space reads all ones (None: unreadable); ``driver`` is the
    ``nvidia-match`` check's status and evidence, None before the first check cycle."""

    counts: agent_counts.Counts
    baseline: agent_counts.Counts
    gpu_index: Mapping[str, str]
    config_all_ff: Mapping[str, bool | None]
    kernel_log_problem: str | None
    driver: tuple[decisions.CheckStatus, str] | None = None
    uuid_by_pci: Mapping[str, str] = field(default_factory=dict)  # from the kernel's GPU-at lines
    recovery: tuple[decisions.CheckStatus, str] | None = None  # ``gpu-recovery``, if run
    fabric: tuple[decisions.CheckStatus, str] | None = None  # ``nvlink-fabric``, if run

    @property
    def this_boot(self) -> agent_counts.Counts:
        return self.counts.since(self.baseline)


def compute(
    seen: Seen, classifier: xid_signals.XidClassifier, now: datetime
) -> dict[str, nc.GpuCondition]:
    """Every condition the agent reports, by type (``GpuDriverMismatch`` only once checked)."""
    out = [
        _fallen_off(seen, now),
        _hardware_xids(seen, classifier, now),
        _kernel_log(seen.kernel_log_problem, now),
        _fabric(seen, now),
    ]
    if seen.driver is not None:
        out.append(_driver(*seen.driver, now))
    if seen.recovery is not None:
        out.append(_recovery(seen, *seen.recovery, now))
    return {c.type: c for c in out}


def carry_transitions(
    new: Mapping[str, nc.GpuCondition], old: Mapping[str, nc.GpuCondition]
) -> dict[str, nc.GpuCondition]:
    """``new`` with each condition's transition time kept from ``old`` while its status holds."""
    out = {}
    for kind, condition in new.items():
        before = old.get(kind)
        held = before is not None and before.status == condition.status
        kept = before.last_transition if before is not None and held else None
        out[kind] = replace(condition, last_transition=kept) if kept else condition
    return out


def changed(new: Mapping[str, nc.GpuCondition], old: Mapping[str, nc.GpuCondition]) -> bool:
    """Whether a status, reason or message differs (a write is due)."""
    def key(cs: Mapping[str, nc.GpuCondition]) -> dict[str, tuple[str, str, str]]:
        return {k: (c.status, c.reason, c.message) for k, c in cs.items()}

    return key(new) != key(old)


# ---- each condition ---------------------------------------------------------------------------


def _fallen_off(seen: Seen, now: datetime) -> nc.GpuCondition:
    cards = _fallen_off_cards(seen)
    if not cards:
        return nc.GpuCondition(nc.GPU_FALLEN_OFF_BUS, "False", ON_BUS,
                               "no GPU fell off the bus this boot", now)
    gone = [c for c in cards if seen.config_all_ff.get(c.pci or "") is True]
    if gone:
        text = "the kernel said the GPU fell off the bus and its PCI config space reads all ones"
        return nc.GpuCondition(nc.GPU_FALLEN_OFF_BUS, "True", nc.GONE_FROM_BUS,
                               nc.message(gone, text), now)
    text = ("the kernel said the GPU fell off the bus; its PCI config space still answers "
            "(or could not be read)")
    return nc.GpuCondition(nc.GPU_FALLEN_OFF_BUS, "True", FELL_OFF_ANSWERS,
                           nc.message(cards, text), now)


def _fallen_off_cards(seen: Seen) -> list[nc.GpuNamed]:
    """The GPUs the kernel said fell off the bus this boot: Xid 79 or the message."""
    found: dict[tuple[str, str], nc.GpuNamed] = {}
    grown = seen.this_boot
    for gpu, uuid, pci, code, _ in grown.xids:
        if code == faults.FALLEN_OFF_BUS_XID:
            found.setdefault((pci, uuid), _named(seen, pci, uuid, gpu, faults.FALLEN_OFF_BUS_XID))
    for pci, uuid in grown.fallen_off:
        if not any(_same_card(key, pci, uuid) for key in found):
            found[(pci, uuid)] = _named(seen, pci, uuid, None, faults.FALLEN_OFF_BUS_XID)
    return sorted(found.values(), key=_order)


def _hardware_xids(
    seen: Seen, classifier: xid_signals.XidClassifier, now: datetime
) -> nc.GpuCondition:
    named = sorted(
        (
            _named(seen, pci, uuid, gpu, code)
            for gpu, uuid, pci, code, rule in seen.this_boot.xids
            if xid_signals.is_hardware(classifier, code, rule)
        ),
        key=_order,
    )
    if not named:
        return nc.GpuCondition(nc.GPU_HARDWARE_XID, "False", NO_HARDWARE_XID,
                               "no hardware-class Xid this boot", now)
    return nc.GpuCondition(nc.GPU_HARDWARE_XID, "True", HARDWARE_XID,
                           nc.message(named, "hardware-class Xid(s) this boot"), now)


def _kernel_log(problem: str | None, now: datetime) -> nc.GpuCondition:
    if problem is None:
        return nc.GpuCondition(nc.GPU_KERNEL_LOG_UNREADABLE, "False", READABLE,
                               "the agent reads the kernel log", now)
    return nc.GpuCondition(nc.GPU_KERNEL_LOG_UNREADABLE, "True", UNREADABLE, problem, now)


def _driver(status: decisions.CheckStatus, evidence: str, now: datetime) -> nc.GpuCondition:
    text = evidence[: nc.MAX_MESSAGE]
    if status is decisions.CheckStatus.FAIL:
        return nc.GpuCondition(nc.GPU_DRIVER_MISMATCH, "True", MISMATCH, text, now)
    if status is decisions.CheckStatus.PASS:
        return nc.GpuCondition(nc.GPU_DRIVER_MISMATCH, "False", MATCH, text, now)
    return nc.GpuCondition(nc.GPU_DRIVER_MISMATCH, "Unknown", MISMATCH_UNKNOWN, text, now)


def _recovery(
    seen: Seen, status: decisions.CheckStatus, evidence: str, now: datetime
) -> nc.GpuCondition:
    kind = nc.GPU_RECOVERY_REQUIRED
    if status is decisions.CheckStatus.FAIL:
        named = [_named(seen, p, seen.uuid_by_pci.get(p, ""), None, messages.RECOVERY_ACTION_XID)
                 for p, _ in gpu_state.failing_gpus(evidence)]
        return nc.GpuCondition(kind, "True", nc.DRIVER_ASKS_RECOVERY,
                               nc.message(named, f"nvidia-smi gpu_recovery_action: {evidence}"),
                               now)
    if status is decisions.CheckStatus.PASS:
        return nc.GpuCondition(kind, "False", NO_RECOVERY, evidence[: nc.MAX_MESSAGE], now)
    return nc.GpuCondition(kind, "Unknown", RECOVERY_UNKNOWN, evidence[: nc.MAX_MESSAGE], now)


def _fabric(seen: Seen, now: datetime) -> nc.GpuCondition:
    """A fatal SXid this boot first (it names the switch), then a failed registration (it
    names the GPUs); else no fault, with what the fabric check last said."""
    kind = nc.GPU_FABRIC_FAULT
    fatal = [key for key in seen.this_boot.sxids if key.severity == FATAL]
    if fatal:
        shown = ", ".join(f"nvswitch={address or '?'} sxid={code}" for address, code, _ in fatal)
        text = f"{shown}; fatal NVSwitch SXid(s) this boot: reset the switches and GPUs"
        return nc.GpuCondition(kind, "True", nc.FATAL_SXID, text[: nc.MAX_MESSAGE], now)
    status, evidence = seen.fabric or (None, "not checked")
    if status is decisions.CheckStatus.FAIL:
        named = [_named(seen, p, seen.uuid_by_pci.get(p, ""), None, None)
                 for p, _ in gpu_state.failing_gpus(evidence)]
        return nc.GpuCondition(kind, "True", nc.FABRIC_NOT_REGISTERED,
                               nc.message(named, evidence), now)
    text = f"no fatal NVSwitch SXid this boot; fabric: {status or ''} {evidence}"
    return nc.GpuCondition(kind, "False", NO_FABRIC_FAULT, " ".join(text.split())[: nc.MAX_MESSAGE],
                           now)


# ---- helpers ----------------------------------------------------------------------------------


def _named(seen: Seen, pci: str, uuid: str, gpu: str | None, xid: int | None) -> nc.GpuNamed:
    index = gpu or seen.gpu_index.get(uuid) or seen.gpu_index.get(pci) or "?"
    return nc.GpuNamed(gpu=index, pci=pci or None, uuid=uuid or None, xid=xid)


def _same_card(key: tuple[str, str], pci: str, uuid: str) -> bool:
    return (bool(pci) and key[0] == pci) or (bool(uuid) and key[1] == uuid)


def _order(g: nc.GpuNamed) -> tuple[str, str, int]:
    return (g.gpu.zfill(4), g.pci or "", g.xid or 0)
