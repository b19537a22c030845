"""The node conditions gpuguard's agent reports on its own Node, and how the controller reads them.

The agent writes facts; the controller decides (docs/design.md#fast-path). The convention is
node-problem-detector's: one condition type per problem, status ``True`` while it holds, a
CamelCase reason and a message for people (``kubectl describe node`` shows them). gpuguard's
message is also read by the controller, so it has a fixed form: the GPUs it names as
``gpu=3 pci=0000:3b:00.0 uuid=GPU-… xid=79`` (several separated by ``, ``), then ``; `` and
free text. Only ``GpuFallenOffBus`` with reason ``GpuGoneFromBus`` — the kernel said the GPU
fell off the bus *and* its PCI config space now reads all ones — is an unambiguous hardware
fault that warrants evaluating the node at once instead of at the next tick.

Two conditions carry persistent states a kernel line alone does not (docs/xid-events.md#
persistent-states): ``GpuRecoveryRequired`` (the driver's recovery action, read each check
cycle, names the GPUs as ``xid=154`` — it is what a missed Xid 154 line said) and
``GpuFabricFault`` (a fatal NVSwitch SXid this boot, or a GPU whose NVLink fabric registration
failed). The controller reads both as hardware signals (``policy.xid_signals``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuguard.model import timestamps

GPU_FALLEN_OFF_BUS = "GpuFallenOffBus"
GPU_HARDWARE_XID = "GpuHardwareXid"
GPU_DRIVER_MISMATCH = "GpuDriverMismatch"
GPU_KERNEL_LOG_UNREADABLE = "GpuKernelLogUnreadable"
GPU_RECOVERY_REQUIRED = "GpuRecoveryRequired"
GPU_FABRIC_FAULT = "GpuFabricFault"
TYPES = (GPU_FALLEN_OFF_BUS, GPU_HARDWARE_XID, GPU_DRIVER_MISMATCH, GPU_KERNEL_LOG_UNREADABLE,
         GPU_RECOVERY_REQUIRED, GPU_FABRIC_FAULT)

TIME_FIELDS = ("lastTransitionTime", "lastHeartbeatTime")  # RFC 3339 in the Node API
GONE_FROM_BUS = "GpuGoneFromBus"  # kernel line + config space all ones: the card is gone
DRIVER_ASKS_RECOVERY = "DriverAsksRecovery"  # nvidia-smi's gpu_recovery_action is not None
FATAL_SXID = "NvSwitchFatalSxid"  # a Fatal SXid line this boot
FABRIC_NOT_REGISTERED = "FabricRegistrationFailed"  # a GPU's fabric state failed / not started
FAULT_REASONS = {
    GPU_RECOVERY_REQUIRED: frozenset({DRIVER_ASKS_RECOVERY}),
    GPU_FABRIC_FAULT: frozenset({FATAL_SXID, FABRIC_NOT_REGISTERED}),
}
"""The persistent-state conditions and the reasons that make them a hardware signal."""
MAX_MESSAGE = 1024  # characters; a longer message is cut (a Node object is capped at 1.5 MB)
_FIELDS = ("gpu", "pci", "uuid", "xid")


@dataclass(frozen=True, slots=True)
class GpuNamed:
    """One GPU a condition's message names."""

    gpu: str
    pci: str | None = None
    uuid: str | None = None
    xid: int | None = None

    def render(self) -> str:
        values = (self.gpu, self.pci, self.uuid, None if self.xid is None else str(self.xid))
        return " ".join(f"{k}={v}" for k, v in zip(_FIELDS, values, strict=True) if v)


@dataclass(frozen=True, slots=True)
class GpuCondition:
    """One of gpuguard's conditions as the Node carries it."""

    type: str
    status: str  # "True", "False" or "Unknown"
    reason: str = ""
    message: str = ""
    last_transition: datetime | None = None

    @property
    def holds(self) -> bool:
        return self.status == "True"

    @property
    def gpus(self) -> tuple[GpuNamed, ...]:
        return gpus_in(self.message)


def message(gpus: Iterable[GpuNamed], text: str) -> str:
    """The condition message: the named GPUs, then ``; `` and ``text``, cut to MAX_MESSAGE."""
    named = ", ".join(g.render() for g in gpus)
    full = f"{named}; {text}" if named else text
    return full[:MAX_MESSAGE]


def gpus_in(text: str) -> tuple[GpuNamed, ...]:
    """The GPUs a message written by ``message`` names; () for any other text."""
    head, sep, _ = text.partition("; ")
    if not sep or not head.startswith("gpu="):
        return ()
    return tuple(g for part in head.split(", ") if (g := _gpu(part)) is not None)


def _gpu(part: str) -> GpuNamed | None:
    fields = dict(f.partition("=")[::2] for f in part.split() if "=" in f)
    if not fields.get("gpu"):
        return None
    xid = fields.get("xid", "")
    return GpuNamed(
        gpu=fields["gpu"],
        pci=fields.get("pci") or None,
        uuid=fields.get("uuid") or None,
        xid=int(xid) if xid.isdigit() else None,
    )


def unambiguous_fault(conditions: Mapping[str, GpuCondition]) -> GpuCondition | None:
    """The condition that says a GPU is gone from the bus, if the node carries it."""
    condition = conditions.get(GPU_FALLEN_OFF_BUS)
    if condition is not None and condition.holds and condition.reason == GONE_FROM_BUS:
        return condition
    return None


def newly_urgent(
    before: Mapping[str, GpuCondition] | None, after: Mapping[str, GpuCondition]
) -> bool:
    """Whether a change from ``before`` (None: a node not seen before) to ``after`` brings an
    unambiguous fault, or names new GPUs in one: the controller evaluates the node at once."""
    now = unambiguous_fault(after)
    if now is None:
        return False
    was = None if before is None else unambiguous_fault(before)
    return was is None or set(now.gpus) - set(was.gpus) != set()


def malformed_times(conditions: object) -> tuple[str, ...]:
    """Each time of a Node's ``status.conditions`` (raw JSON, any condition type) that is not
    a time with a zone, as ``<type> <field> '<text>'``: readers that parse them whole
    (lightkube's models, kubectl) fail on the node, and gpuguard reads the time as unknown
    (``timestamps.parse_utc``), so people must see which node and which condition. A missing
    time is no fault (the API server's own objects may omit ``lastHeartbeatTime``)."""
    found = []
    for condition in conditions if isinstance(conditions, list) else ():
        if not isinstance(condition, Mapping):
            continue
        for key in TIME_FIELDS:
            text: Any = condition.get(key)
            if text is None or (isinstance(text, str) and timestamps.parse_utc(text)):
                continue
            found.append(f"{condition.get('type') or '?'} {key} {str(text)[:64]!r}")
    return tuple(found)


def persistent_faults(conditions: Mapping[str, GpuCondition]) -> list[GpuCondition]:
    """The node's ``GpuRecoveryRequired`` and ``GpuFabricFault`` conditions that hold with a
    fault reason (docs/xid-events.md#persistent-states), in ``TYPES`` order."""
    return [
        c for kind, reasons in FAULT_REASONS.items()
        if (c := conditions.get(kind)) is not None and c.holds and c.reason in reasons
    ]
