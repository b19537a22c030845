"""The grammar of the NVIDIA driver's ``NVRM:`` messages that gpuguard acts on.

Pure functions over the text after ``NVRM:``: the Xid line (``Xid (PCI:0000:01:00): 31, pid=...,
name=..., <message>``), the ``GPU at PCI:...: GPU-<uuid>`` line that maps a slot to a card, the
pieces of the "has fallen off the bus" message, Xid 154's recovery action, Xid 94/95's
``RST:``/``D-RST:`` flags and the register blocks of NVLink5 (144-150) and Xid 74 lines; and the
NVSwitch driver's ``SXid`` line (not an ``NVRM:`` message). Kept apart from the stateful parser
so each shape is testable alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuguard.model import pci, xid

XID_MARKER = "Xid"
FALLEN_OFF_BUS = "fallen off the bus"

# The driver always writes "Xid (PCI:...): NN, <text>" (https://docs.nvidia.com/deploy/
# xid-errors/): a code with no comma after it is a line cut short ("...): 7" of "...): 79, ..."),
# not an Xid 7 — malformed, as the node agent sees it until the rest of the line arrives.
_XID = re.compile(r"^Xid \((?P<address>[^()]*)\): *(?P<code>\d{1,5}), *(?P<rest>.*?)\s*$")
_PID_NAME = re.compile(r"^pid=(?P<pid>'?<unknown>'?|\d{1,10})(?:, *name=(?P<name>[^,]*))?(?:, *|$)")
_GPU_AT = re.compile(r"^GPU at (?P<address>PCI:\S+?): (?P<uuid>\S+)")
_UUID = re.compile(r"^GPU-[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}$", re.IGNORECASE)
_FALLEN_OFF_START = re.compile(r"^The NVIDIA GPU (?P<address>[0-9a-fA-F:.]+)\s*$")
# "0000:3b:00.0", or without the domain ("GPU 18:00.0: GPU has fallen off the bus.", gpud's
# kernel-log tests): the domain is then 0000, as pci.normalize_pci reads it.
_SYSFS_ADDRESS = re.compile(r"\b(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\b")
_RECOVERY = re.compile(
    r"recovery action changed from .*? to (?P<value>0x[0-9a-fA-F]{1,8}|\d{1,8})? *"
    r"(?:\((?P<name>[^)]*)\))?",
    re.IGNORECASE,
)
_RESET_FLAG = re.compile(r"(?<![\w-])(?P<flag>RST|D-RST): *(?P<answer>Yes|No)\b", re.IGNORECASE)

# NVLink5: "RLW_REMAP Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 ...)" (gpud PR #1174's
# kernel lines; NVIDIA's Xid catalog, "XID 144-150 Decode").
_NVLINK5 = re.compile(
    r"^(?P<unit>[A-Za-z0-9_/]+)\s+(?P<severity>Fatal|Nonfatal|Non-fatal)\s+XC\d+\s+i\d+\s+"
    r"Link\s+(?P<link>-?\d{1,3})\s*\((?P<words>0x[0-9a-fA-F]{1,8}(?:\s+0x[0-9a-fA-F]{1,8}){1,7})\)"
)
# Xid 74: "NVLink: fatal error detected on link 14(0x100000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)".
_XID74 = re.compile(
    r"\blink\s+(?P<link>\d{1,3})\s*\((?P<words>0x[0-9a-fA-F]{1,8}(?:\s*,\s*0x[0-9a-fA-F]{1,8}){0,7})\)",
    re.IGNORECASE,
)
# NVSwitch: "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress ..."
# (NVIDIA Fabric Manager user guide, appendix D "NVSwitch SXid errors"; gpud's sxid tests).
SXID_MARKER = "SXid ("
_SXID = re.compile(r"SXid \((?P<address>[^()]*)\): *(?P<code>\d{1,6}), *(?P<rest>.*?)\s*$")
_SXID_SEVERITY = re.compile(r"^(?P<severity>Fatal|Non-fatal)\b", re.IGNORECASE)
NVLINK5_CODES = frozenset(range(144, 151))
NVLINK_ERROR_XID = 74
_UNKNOWN_PROCESS = "<unknown>"
_ACTIONS_BY_NAME = {
    "none": xid.RecoveryAction.NONE,
    "gpu reset": xid.RecoveryAction.GPU_RESET_REQUIRED,
    "gpu reset required": xid.RecoveryAction.GPU_RESET_REQUIRED,
    "node reboot": xid.RecoveryAction.NODE_REBOOT_REQUIRED,
    "node reboot required": xid.RecoveryAction.NODE_REBOOT_REQUIRED,
    "drain p2p": xid.RecoveryAction.DRAIN_P2P,
    "drain and reset": xid.RecoveryAction.DRAIN_AND_RESET,
    "gpu health check": xid.RecoveryAction.GPU_HEALTH_CHECK,
}
# NVML's nvmlDeviceGpuRecoveryAction_t, for a line whose name in parentheses is missing.
_ACTIONS_BY_VALUE = {
    0: xid.RecoveryAction.NONE,
    1: xid.RecoveryAction.GPU_RESET_REQUIRED,
    2: xid.RecoveryAction.NODE_REBOOT_REQUIRED,
    3: xid.RecoveryAction.DRAIN_P2P,
    4: xid.RecoveryAction.DRAIN_AND_RESET,
}
RECOVERY_ACTION_XID = 154


@dataclass(frozen=True, slots=True)
class XidFields:
    """What one ``Xid (...): NNN, ...`` text says, before the stream's context is added."""

    code: int
    pci: str | None
    message: str
    pid: int | None
    process: str | None
    recovery_action: xid.RecoveryAction | None
    reset_flags: tuple[str, ...]
    detail: xid.EventDetail | None = None
    address: str = ""


def read_xid(text: str) -> XidFields | None:
    """Read the text after ``NVRM: `` of an Xid line; None when it is not a well-formed one.

    ``message`` is the driver's text after ``NNN, `` and after the optional ``pid=``/``name=``
    fields; ``pci`` is None when the address was redacted (``PCI:...``) or is not one.
    """
    match = _XID.match(text)
    if match is None:
        return None
    code = int(match["code"])
    pid, process, message = _split_process(match["rest"] or "")
    return XidFields(
        code=code,
        pci=_xid_address(match["address"]),
        message=message,
        pid=pid,
        process=process,
        recovery_action=recovery_action(message) if code == RECOVERY_ACTION_XID else None,
        reset_flags=reset_flags(message),
        detail=read_detail(code, message),
        address=match["address"].strip(),
    )


@dataclass(frozen=True, slots=True)
class SxidFields:
    """One NVSwitch ``SXid`` line: the switch's PCI (None if unreadable), the code, the driver's
    ``Fatal``/``Non-fatal`` word (``""`` when the line has none, e.g. a ``Data {...}`` line)."""

    code: int
    pci: str | None
    severity: str
    message: str


def read_sxid(line: str) -> SxidFields | None:
    """Read an NVSwitch ``SXid (PCI:...): NNNNN, ...`` line anywhere in ``line``; None if none."""
    match = _SXID.search(line)
    if match is None:
        return None
    rest = match["rest"]
    severity = _SXID_SEVERITY.match(rest)
    return SxidFields(
        code=int(match["code"]),
        pci=pci.try_normalize_pci(match["address"]),
        severity=severity["severity"].capitalize() if severity else "",
        message=rest,
    )


def read_gpu_at(text: str) -> tuple[str, str | None] | None:
    """Read ``GPU at PCI:0000:9b:00: GPU-<uuid>`` as (normalised PCI, UUID or None if redacted)."""
    match = _GPU_AT.match(text)
    if match is None:
        return None
    address = pci.try_normalize_pci(match["address"])
    if address is None:
        return None
    uuid = match["uuid"]
    return address, uuid if _UUID.match(uuid) else None


def read_fallen_off_start(text: str) -> str | None:
    """The PCI of ``The NVIDIA GPU 0000:b3:00.0``, the first line of the multi-line message."""
    match = _FALLEN_OFF_START.match(text)
    return pci.try_normalize_pci(match["address"]) if match else None


def says_fallen_off_bus(text: str) -> bool:
    return FALLEN_OFF_BUS in text


def address_in(text: str) -> str | None:
    """The first sysfs-form PCI address (``0000:3b:00.0``, or ``3b:00.0`` with domain 0000)
    written anywhere in ``text``."""
    match = _SYSFS_ADDRESS.search(text)
    return pci.try_normalize_pci(match.group()) if match else None


def recovery_action(message: str) -> xid.RecoveryAction:
    """Xid 154's new recovery action: ``... changed from 0x0 (None) to 0x1 (GPU Reset Required)``.

    The name in parentheses wins; NVML's numeric value is the fallback; anything else is OTHER.
    """
    match = _RECOVERY.search(message)
    if match is None:
        return xid.RecoveryAction.OTHER
    if match["name"] is not None:
        by_name = _ACTIONS_BY_NAME.get(" ".join(match["name"].lower().split()))
        if by_name is not None:
            return by_name
    if match["value"] is not None:
        value = match["value"]
        number = int(value, 16) if value.lower().startswith("0x") else int(value)
        return _ACTIONS_BY_VALUE.get(number, xid.RecoveryAction.OTHER)
    return xid.RecoveryAction.OTHER


def reset_flags(message: str) -> tuple[str, ...]:
    """The Xid 94/95 flags answered ``Yes``: ``RST`` (GPU reset) and/or ``D-RST`` (drain, reset)."""
    return tuple(
        match["flag"].upper()
        for match in _RESET_FLAG.finditer(message)
        if match["answer"].lower() == "yes"
    )


def read_detail(code: int, message: str) -> xid.EventDetail | None:
    """The register block of an NVLink5 (144-150) or Xid 74 message; None for other codes or
    when the block is missing or cut short."""
    if code in NVLINK5_CODES:
        match = _NVLINK5.search(message)
        if match is None:
            return None
        words = tuple(int(w, 16) for w in match["words"].split())
        return xid.EventDetail(match["unit"], match["severity"], int(match["link"]), words)
    if code == NVLINK_ERROR_XID and (match := _XID74.search(message)) is not None:
        words = tuple(int(w.strip(), 16) for w in match["words"].split(","))
        return xid.EventDetail("", "", int(match["link"]), words)
    return None


def _split_process(rest: str) -> tuple[int | None, str | None, str]:
    match = _PID_NAME.match(rest)
    if match is None:
        return None, None, rest
    pid = int(match["pid"]) if match["pid"].isdecimal() else None
    name = (match["name"] or "").strip()
    process = name if name and name != _UNKNOWN_PROCESS else None
    return pid, process, rest[match.end() :]


def _xid_address(inside_parentheses: str) -> str | None:
    """``PCI:0000:01:00``, ``PCI:0000:01:00 GPU-I:05`` (MIG) or the old ``0000:03:00``."""
    words = inside_parentheses.split()
    return pci.try_normalize_pci(words[0]) if words else None
