"""The vocabulary of Xid knowledge: how gpuguard classes a code, what caused it, and the
kernel's events (an Xid line or the non-Xid "fallen off the bus" message)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class XidClass(StrEnum):
    """gpuguard's class for an Xid code: what the guard does with it.

    ``user`` codes come from applications and never isolate a node nor mask a hardware Xid;
    ``hardware`` codes count as hardware faults; ``informational`` codes are recorded only.
    """

    USER = "user"
    HARDWARE = "hardware"
    INFORMATIONAL = "informational"


class CauseCategory(StrEnum):
    """Where NVIDIA's catalog places the likely cause of an Xid."""

    USER_APP = "user-app"
    DRIVER = "driver"
    FIRMWARE = "firmware"
    MEMORY = "memory"
    BUS = "bus"
    INTERCONNECT = "interconnect"
    THERMAL = "thermal"
    INFORMATIONAL = "informational"


class RecoveryAction(StrEnum):
    """Xid 154's "GPU recovery action changed to ..." advice, normalised."""

    NONE = "none"
    GPU_RESET_REQUIRED = "gpu-reset-required"
    NODE_REBOOT_REQUIRED = "node-reboot-required"
    DRAIN_P2P = "drain-p2p"
    DRAIN_AND_RESET = "drain-and-reset"
    GPU_HEALTH_CHECK = "gpu-health-check"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class EventDetail:
    """The register block some Xid lines carry, for judging one event rather than its code.

    NVLink5 (Xid 144-150): ``<unit> <Fatal|Nonfatal> XC<n> i<n> Link <n> (0x<intrinfo>
    0x<error status> ...)``; Xid 74: ``... link <n>(0x<reg0>, 0x<reg1>, ...)``. ``unit`` and
    ``severity`` are empty for Xid 74; ``link`` is -1 where the driver names no link.
    """

    unit: str
    severity: str
    link: int
    words: tuple[int, ...]


class KernelEventKind(StrEnum):
    XID = "xid"
    FALLEN_OFF_BUS = "fallen_off_bus"


@dataclass(frozen=True, slots=True)
class KernelEvent:
    """One GPU event read from a kernel log.

    ``pci`` is normalised (``0000:01:00.0``) or None when the reporter redacted it or it is
    no PCI address; ``address`` keeps the address as the line wrote it (``PCI:0000:01:00``,
    ``invalid``), so an unreadable one is still shown, never lost;
    ``uuid`` comes from an earlier ``NVRM: GPU at PCI:... GPU-<uuid>`` line of the same stream.
    ``timestamp`` is set only when the line carried an absolute time.
    """

    line_no: int
    kind: KernelEventKind
    xid: int | None
    pci: str | None
    message: str
    pid: int | None = None
    process: str | None = None
    uuid: str | None = None
    recovery_action: RecoveryAction | None = None
    reset_flags: tuple[str, ...] = ()
    detail: EventDetail | None = None
    address: str = ""
    timestamp: datetime | None = None
    uptime_s: float | None = None
