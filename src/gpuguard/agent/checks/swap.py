"""``swap``: the kubelet expects swap off (the onboarding skill's host-setup step, the lifecycle
report (docs/design.md#incidents)).

Reads ``/proc/swaps``: only its header line means no active swap.
"""

from __future__ import annotations

from pathlib import Path

from gpuguard.agent.checks import hostfs, result

NAME = "swap"
SWAPS = "proc/swaps"


def active_swaps(root: Path) -> list[str]:
    """Active swap areas as ``name (type, size KiB)``; HostReadError when unreadable/garbled."""
    lines = hostfs.read_text(root, SWAPS).splitlines()
    if not lines or not lines[0].startswith("Filename"):
        raise hostfs.HostReadError(f"{hostfs.shown(SWAPS)}: no 'Filename' header line")
    areas = []
    for line in lines[1:]:
        fields = line.split()
        if len(fields) >= 3:
            areas.append(f"{fields[0]} ({fields[1]}, {fields[2]} KiB)")
        elif fields:
            raise hostfs.HostReadError(f"{hostfs.shown(SWAPS)}: malformed line {line!r}")
    return areas


def check(root: Path = Path("/")) -> result.CheckResult:
    areas = active_swaps(root)
    if not areas:
        return result.passed(NAME, f"no active swap ({hostfs.shown(SWAPS)} has only its header)")
    return result.failed(
        NAME,
        f"swap is on: {', '.join(areas)} ({hostfs.shown(SWAPS)})",
        "swapoff -a, then remove the swap entries from /etc/fstab (and mask any *.swap unit)",
    )
