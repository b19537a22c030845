"""One normalised form for PCI addresses: ``dddd:bb:dd.f``, lowercase (the sysfs form).

The kernel prints ``PCI:0000:01:00`` (no function), very old drivers ``(0000:03:00)``,
dcgm-exporter ``00000000:01:00.0`` (8-digit domain). All of them name the same function 0 of
the same device, and every layer compares addresses only in the normalised form.
"""

from __future__ import annotations

import re

from gpuguard.errors import InputError

_PCI = re.compile(
    r"^(?:PCI:)?(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):"
    r"(?P<device>[0-9a-fA-F]{1,2})(?:\.(?P<function>[0-7]))?$"
)


def normalize_pci(text: str) -> str:
    """Return ``dddd:bb:dd.f`` for any PCI address spelling gpuguard meets.

    A missing domain is 0000, a missing function is 0 (the kernel's Xid line omits it; NVIDIA
    GPUs are function 0). An 8-digit dcgm-exporter domain keeps its low 4 digits only when the
    high ones are zero. Raises InputError naming the text when it is not a PCI address.
    """
    stripped = text.strip().strip("()")
    match = _PCI.match(stripped)
    if match is None:
        raise InputError(f"not a PCI address: {text!r} (expected e.g. 0000:01:00.0)")
    domain = int(match["domain"] or "0", 16)
    if domain > 0xFFFF:
        raise InputError(f"PCI domain out of range in {text!r}")
    bus = int(match["bus"], 16)
    device = int(match["device"], 16)
    function = int(match["function"] or "0")
    if device > 0x1F:
        raise InputError(f"PCI device number out of range in {text!r}")
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function}"


def try_normalize_pci(text: str | None) -> str | None:
    """Like normalize_pci, but None for a missing or redacted address (``PCI:...``)."""
    if text is None:
        return None
    try:
        return normalize_pci(text)
    except InputError:
        return None
