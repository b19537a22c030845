"""Kernel log lines the simulated world writes, in the real NVIDIA driver's formats.

Every format here is copied from real logs in ``tests/data/reference/kernel_xid_lines.txt`` so the
agent's kernel-log reader is tested against what hosts actually print: the PCI->UUID line
(``NVRM: GPU at PCI:0000:99:00: GPU-<uuid>``, once per GPU per boot, before its first Xid),
Xid lines (``NVRM: Xid (PCI:0000:99:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen
off the bus.`` — the kernel prints the PCI address without the function), the open driver's
multi-line "fallen off the bus" message that carries no Xid number, and the NVML/kernel-module
"API mismatch" message. Lines are stamped the way ``/var/log/kern.log`` holds them
(syslog time, host, ``kernel:``, the kernel's uptime stamp).
"""

from __future__ import annotations

from datetime import datetime, timedelta

NVIDIA_VENDOR_ID = 0x10DE

# Messages after "NVRM: Xid (PCI:...): <code>, [pid=..., name=...,] " as real drivers print them.
_MESSAGES: dict[int, str] = {
    13: "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
    31: (
        "channel 0x0000000c, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC2 GPCCLIENT_PROP_0 "
        "faulted @ 0x0_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ"
    ),
    43: "Ch 00000008",
    45: "Ch 00000001",
    48: (
        "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
        "at physAddr 0x7fffa8860 partition 3, subpartition 0."
    ),
    63: "Row Remapper: New row marked for remapping, reset gpu to activate.",
    64: "Row Remapper: Failed to remap a row, a GPU reset is needed to recover.",
    79: "GPU has fallen off the bus.",
    94: "Contained: SM (0x1). RST: No, D-RST: No",
    95: "Uncontained: LTC TAG (0x2, 0x1). RST: Yes, D-RST: No",
    119: (
        "Timeout after 6s of waiting for RPC response from GPU0 GSP! "
        "Expected function 76 (GSP_RM_CONTROL) (0x20801813 0x4c)."
    ),
    154: "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
}
# Codes raised by the driver itself (interrupt context): printed with an unknown pid.
_DRIVER_CONTEXT = frozenset({48, 63, 64, 79, 94, 95, 154})


def kernel_pci(pci: str) -> str:
    """``0000:99:00.0`` -> ``PCI:0000:99:00`` (the kernel's Xid spelling, no function)."""
    return "PCI:" + pci.rsplit(".", 1)[0]


def default_message(code: int) -> str:
    return _MESSAGES.get(code, "Graphics Exception: ESR 0x404000=0x80000002")


def gpu_at(pci: str, uuid: str) -> str:
    return f"NVRM: GPU at {kernel_pci(pci)}: {uuid}"


def xid(pci: str, code: int, message: str | None = None, *, pid: int | None = None,
        process: str | None = None) -> str:
    """One Xid line; driver-context codes get ``pid='<unknown>', name=<unknown>``."""
    text = message if message is not None else default_message(code)
    if pid is not None:
        who = f"pid={pid}, name={(process or 'python3')[:15]}, "
    elif code in _DRIVER_CONTEXT:
        who = "pid='<unknown>', name=<unknown>, "
    else:
        who = ""
    return f"NVRM: Xid ({kernel_pci(pci)}): {code}, {who}{text}"


def sxid(switch: int, pci: str, code: int, severity: str, message: str) -> str:
    """An NVSwitch driver line, as gpud's SXid test cases hold them:
    ``nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress ...``."""
    return f"nvidia-nvswitch{switch}: SXid (PCI:{pci}): {code}, {severity}, {message}"


def fallen_off_bus(pci: str, device_id: int) -> list[str]:
    """The open kernel module's (570+) multi-line message: no Xid number at all."""
    return [
        f"NVRM: The NVIDIA GPU {pci}",
        f"NVRM: (PCI ID: {NVIDIA_VENDOR_ID:04x}:{device_id:04x}) installed in this system has",
        "NVRM: fallen off the bus and is not responding to commands.",
    ]


def api_mismatch(client: str, module: str) -> list[str]:
    """Printed when an NVML client newer (or older) than the loaded module opens the device."""
    return [
        f"NVRM: API mismatch: the client has the version {client}, but",
        f"NVRM: this kernel module has the version {module}.  Please",
        "NVRM: make sure that this kernel module and all NVIDIA driver",
        "NVRM: components have the same version.",
    ]


def module_loaded(version: str) -> str:
    return (
        f"NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release Build  "
        "(dvs-builder@U22-I3-AE18-23-3)"
    )


def boot_banner(kernel_release: str) -> str:
    return f"Linux version {kernel_release} (buildd@lcy02-amd64-080) #1-Ubuntu SMP PREEMPT_DYNAMIC"


def stamp(lines: list[str], host: str, now: datetime, uptime: timedelta) -> list[str]:
    """Prefix lines as ``/var/log/kern.log`` holds them: ``Sep 10 13:03:59 host kernel: [ 1.5]``."""
    day = f"{now:%b} {now.day:>2} {now:%H:%M:%S}"
    seconds = max(0.0, uptime.total_seconds())
    return [f"{day} {host} kernel: [{seconds:12.6f}] {line}" for line in lines]
