"""Which processes hold each GPU open, read from ``/proc`` without NVML or nvidia-smi.

The phantom signature needs "no process on that GPU" (the phantom incident
(docs/design.md#incidents)), and monitoring must never touch the GPUs it watches (the incident
library): so this never opens a device, it only reads the ``/proc/<pid>/fd/*`` symlinks
(``readlink``) and counts, per device minor, the processes with an fd on ``/dev/nvidia<minor>``
(``/dev/nvidiactl``, ``/dev/nvidia-uvm`` are not a GPU). The driver's own helpers hold every GPU all
the time (the phantom incident: ``lsof`` showed nvidia-persistenced on ``/dev/nvidia0``..``7``), so
those are not counted (``INFRASTRUCTURE``).

A host can have 100k fds: the scan stops at a time and fd budget and then says it is
incomplete, and so does a process whose fds cannot be read (EACCES) — an incomplete scan only
reports GPUs it saw held, never a zero it could not vouch for. A process that exits mid-scan
(ENOENT) held nothing.
"""

from __future__ import annotations

import errno
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gpuguard.model import pci

GPU_INFORMATION = "proc/driver/nvidia/gpus"
GPU_DEVICE = re.compile(r"/dev/nvidia(\d+)")
COMM_LENGTH = 15  # the kernel truncates /proc/<pid>/comm to 15 characters
# Driver and monitoring daemons that keep a handle on every GPU; they are not workloads.
INFRASTRUCTURE = frozenset(
    name[:COMM_LENGTH]
    for name in (
        "nvidia-persistenced",
        "nv-hostengine",
        "dcgm-exporter",
        "dcgmi",
        "nvidia-smi",
        "nvidia-device-plugin",
        "gpu-feature-discovery",
    )
)
BUDGET_S = 2.0
MAX_FDS = 200_000


@dataclass(frozen=True, slots=True)
class GpuCard:
    """A GPU as the driver lists it: device minor (``/dev/nvidia<minor>``), PCI, UUID."""

    minor: str
    pci: str
    uuid: str


@dataclass(frozen=True, slots=True)
class ProcessScan:
    """Processes per device minor; ``incomplete`` says why the zeros cannot be trusted."""

    by_minor: Mapping[str, int]
    incomplete: str = ""
    processes: int = 0
    fds: int = 0
    duration_s: float = 0.0

    @property
    def complete(self) -> bool:
        return not self.incomplete


@dataclass(frozen=True, slots=True)
class GpuProcessCount:
    card: GpuCard
    processes: int


@dataclass(frozen=True, slots=True)
class ProcessReport:
    """What the exporter renders: one count per GPU it can vouch for, and whether the scan
    was complete (then every GPU the driver lists has a count, zeros included)."""

    counts: tuple[GpuProcessCount, ...] = ()
    complete: bool = False


@dataclass
class _Budget:
    deadline: float
    max_fds: int
    monotonic: Callable[[], float]
    fds: int = 0

    def spent(self) -> str:
        if self.fds >= self.max_fds:
            return f"fd budget of {self.max_fds} spent"
        if self.monotonic() >= self.deadline:
            return "time budget spent"
        return ""


@dataclass
class _Tally:
    holders: dict[str, set[str]] = field(default_factory=dict)
    unreadable: list[str] = field(default_factory=list)
    processes: int = 0


def scan(
    root: Path,
    *,
    budget_s: float = BUDGET_S,
    max_fds: int = MAX_FDS,
    monotonic: Callable[[], float] = time.monotonic,
) -> ProcessScan:
    """Count the non-infrastructure processes holding each ``/dev/nvidia<minor>`` under
    ``root/proc``, within ``budget_s`` seconds and ``max_fds`` fds."""
    started = monotonic()
    budget = _Budget(started + budget_s, max_fds, monotonic)
    tally = _Tally()
    proc = root / "proc"
    try:
        pids = [e.name for e in os.scandir(proc) if e.name.isdecimal()]
    except OSError as e:
        return ProcessScan({}, f"cannot list {proc}: {e.strerror or e}")
    stopped = ""
    for pid in pids:
        if stopped := budget.spent() or _scan_process(proc / pid, budget, tally):
            break
    counts = {minor: len(pids_) for minor, pids_ in tally.holders.items()}
    incomplete = stopped or _unreadable(tally.unreadable)
    return ProcessScan(counts, incomplete, tally.processes, budget.fds, monotonic() - started)


def _scan_process(folder: Path, budget: _Budget, tally: _Tally) -> str:
    """Record one process's GPUs; the budget's reason when it ran out inside this process."""
    minors: set[str] = set()
    stopped = ""
    try:
        with os.scandir(folder / "fd") as entries:
            for entry in entries:
                budget.fds += 1
                if (minor := _gpu_minor(entry.path)) is not None:
                    minors.add(minor)
                if stopped := budget.spent():
                    break
    except OSError as e:
        if e.errno not in (errno.ENOENT, errno.ESRCH):  # else it exited: it holds nothing now
            tally.unreadable.append(folder.name)
        return ""
    tally.processes += 1
    if minors and _comm(folder) not in INFRASTRUCTURE:
        for minor in minors:
            tally.holders.setdefault(minor, set()).add(folder.name)
    return stopped


def _gpu_minor(link: str) -> str | None:
    try:
        target = os.readlink(link)
    except PermissionError:
        raise  # the whole process is unreadable: the caller says so
    except OSError:  # the fd closed mid-scan, or not a link
        return None
    match = GPU_DEVICE.fullmatch(target)
    return match.group(1) if match else None


def _comm(folder: Path) -> str:
    try:
        return (folder / "comm").read_text(errors="replace").strip()
    except OSError:
        return ""


def _unreadable(pids: list[str]) -> str:
    if not pids:
        return ""
    shown = ", ".join(pids[:5]) + (", ..." if len(pids) > 5 else "")
    return f"fds of {len(pids)} processes unreadable (pid {shown})"


def report(found: ProcessScan, cards: Iterable[GpuCard]) -> ProcessReport:
    """Counts per GPU: every listed card (zeros included) when the scan was complete, else
    only the GPUs it saw held. A minor the driver does not list keeps empty PCI/UUID."""
    by_minor = {card.minor: card for card in cards}
    minors = set(found.by_minor) | (set(by_minor) if found.complete else set())
    counts = tuple(
        GpuProcessCount(by_minor.get(m) or GpuCard(m, "", ""), found.by_minor.get(m, 0))
        for m in sorted(minors, key=_minor_order)
    )
    return ProcessReport(counts, found.complete)


def _minor_order(minor: str) -> tuple[int, str]:
    return (int(minor) if minor.isdecimal() else -1, minor)


def read_cards(root: Path) -> tuple[GpuCard, ...]:
    """The GPUs in the driver's per-GPU information files (filled at driver load, so reading
    them never calls NVML); empty when the files are missing or unreadable."""
    try:
        folders = sorted((root / GPU_INFORMATION).iterdir())
    except OSError:
        return ()
    cards = []
    for folder in folders:
        fields = _information(folder / "information")
        minor = fields.get("Device Minor")
        if minor is None:
            continue
        bus = fields.get("Bus Location", "")
        address = (pci.try_normalize_pci(bus) or bus) if bus else ""
        cards.append(GpuCard(minor, address, fields.get("GPU UUID", "")))
    return tuple(cards)


def _information(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return {}
    pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, value in pairs}
