"""What sysfs says about each NVIDIA GPU: config space, PCIe link, upstream root port and its AER.

A GPU that fell off the bus often stays listed in ``/sys/bus/pci/devices`` while its config
space reads all ones (0xff): that is the evidence a reset cannot help (the lifecycle report
(docs/design.md#incidents), 9/21). Its upstream root port is found by resolving the device's link
(``../../../devices/pci0000:00/ 0000:00:01.0/.../0000:01:00.0``) inside the root and taking the
first PCI address below the host bridge (``pci0000:00``). Each reading becomes an ``EvidenceItem``;
any unreadable or malformed file makes that item UNKNOWN, never PASS.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gpuguard.agent.checks import hostfs, nvidia
from gpuguard.agent.evidence import aer, hostread
from gpuguard.model import decisions, evidence

Status = decisions.CheckStatus
CONFIG_READ_BYTES = 256
_HOST_BRIDGE = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")
_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_SPEED = re.compile(r"^(\d+(?:\.\d+)?) ?GT/s")


@dataclass(frozen=True, slots=True)
class GpuScan:
    """The NVIDIA GPU functions in sysfs and the item that says how the listing went."""

    pcis: tuple[str, ...]
    item: evidence.EvidenceItem


@dataclass(frozen=True, slots=True)
class GpuRead:
    facts: evidence.GpuFacts
    items: tuple[evidence.EvidenceItem, ...]
    port_dir: str | None


def scan_gpus(root: Path) -> GpuScan:
    """NVIDIA display/3D functions (vendor 0x10de, class 0x03xxxx) under sys/bus/pci/devices."""
    shown = hostfs.shown(nvidia.PCI_DEVICES)
    try:
        devices = hostfs.list_dir(root, nvidia.PCI_DEVICES)
    except hostfs.HostReadError as e:
        return GpuScan((), _item("pci-devices", Status.UNKNOWN, str(e)))
    gpus: list[str] = []
    unreadable: list[str] = []
    for device in devices:
        try:
            if _is_nvidia_gpu(root, device):
                gpus.append(device)
        except hostfs.HostReadError as e:
            unreadable.append(str(e))
    found = f"{len(gpus)} NVIDIA GPU(s) of {len(devices)} devices in {shown}"
    found += f": {', '.join(gpus)}" if gpus else ""
    if unreadable:
        return GpuScan(
            tuple(gpus), _item("pci-devices", Status.UNKNOWN, _joined(found, unreadable))
        )
    return GpuScan(tuple(gpus), _item("pci-devices", Status.PASS, found))


def read_gpu(root: Path, pci: str, uuid: str | None) -> GpuRead:
    """Config space, link and root port of a GPU that sysfs lists."""
    config_ff, config_item = _config_space(root, pci)
    link, link_item = _link(root, pci)
    port, port_dir, problem = _root_port(root, pci)
    facts = evidence.GpuFacts(
        pci=pci, uuid=uuid, config_all_ff=config_ff, root_port=port, **dataclasses.asdict(link)
    )
    items = [config_item, link_item]
    if problem:
        items.append(_item("root-port-aer", Status.UNKNOWN, problem, pci))
    return GpuRead(facts, tuple(items), port_dir)


def missing_gpu(pci: str, uuid: str | None, seen_in: str) -> GpuRead:
    """A GPU the kernel log names that sysfs no longer lists."""
    text = f"{seen_in} names {pci} but {hostfs.shown(nvidia.PCI_DEVICES)}/{pci} does not exist"
    facts = evidence.GpuFacts(pci=pci, uuid=uuid, present=False)
    return GpuRead(facts, (_item("gpu-present", Status.FAIL, text, pci),), None)


def aer_item(read: aer.PortRead, pci: str) -> evidence.EvidenceItem:
    """The root-port AER evidence for one GPU: non-zero uncorrectable -> FAIL."""
    counters = read.counters
    described = (
        f"root port {counters.port}: fatal {counters.fatal}, non-fatal {counters.nonfatal}, "
        f"correctable {counters.correctable}; as root port: fatal {counters.rootport_fatal}, "
        f"non-fatal {counters.rootport_nonfatal}, correctable {counters.rootport_correctable}"
    )
    if counters.nonzero:
        described += f"; non-zero: {', '.join(counters.nonzero)}"
    if counters.uncorrectable:
        return _item("root-port-aer", Status.FAIL, _joined(described, read.problems), pci)
    if read.problems:
        return _item("root-port-aer", Status.UNKNOWN, _joined(described, read.problems), pci)
    if not read.files_found:
        text = f"root port {counters.port}: no AER counters in sysfs (AER off or unsupported)"
        return _item("root-port-aer", Status.UNKNOWN, text, pci)
    return _item("root-port-aer", Status.PASS, described, pci)


# ---- config space ----------------------------------------------------------------------------


def config_space_all_ff(root: Path, pci: str) -> bool | None:
    """Whether the GPU's config space reads all ones (it does not answer); None: unreadable."""
    return _config_space(root, pci)[0]


def _config_space(root: Path, pci: str) -> tuple[bool | None, evidence.EvidenceItem]:
    rel = f"{nvidia.PCI_DEVICES}/{pci}/config"
    try:
        data = hostread.read_bytes(root, rel, CONFIG_READ_BYTES)
    except hostfs.HostReadError as e:
        return None, _item("pci-config", Status.UNKNOWN, str(e), pci)
    if not data:
        return None, _item("pci-config", Status.UNKNOWN, f"{hostfs.shown(rel)}: 0 bytes", pci)
    if data == b"\xff" * len(data):
        text = f"{hostfs.shown(rel)}: all {len(data)} bytes read 0xff (the GPU does not answer)"
        return True, _item("pci-config", Status.FAIL, text, pci)
    vendor = int.from_bytes(data[0:2], "little")
    device = int.from_bytes(data[2:4], "little") if len(data) >= 4 else None
    ids = f"vendor 0x{vendor:04x}" + (f", device 0x{device:04x}" if device is not None else "")
    text = f"{hostfs.shown(rel)}: {len(data)} bytes read, {ids}"
    return False, _item("pci-config", Status.PASS, text, pci)


# ---- PCIe link -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Link:
    link_width: int | None = None
    max_link_width: int | None = None
    link_speed_gts: float | None = None
    max_link_speed_gts: float | None = None


def _link(root: Path, pci: str) -> tuple[_Link, evidence.EvidenceItem]:
    base = f"{nvidia.PCI_DEVICES}/{pci}"
    raw: dict[str, str] = {}
    problems: list[str] = []
    for name in ("current_link_width", "max_link_width", "current_link_speed", "max_link_speed"):
        try:
            raw[name] = hostread.read_line(root, f"{base}/{name}")
        except hostfs.HostReadError as e:
            problems.append(str(e))
    link = _Link(
        link_width=_width(raw.get("current_link_width")),
        max_link_width=_width(raw.get("max_link_width")),
        link_speed_gts=_speed(raw.get("current_link_speed")),
        max_link_speed_gts=_speed(raw.get("max_link_speed")),
    )
    shown = ", ".join(f"{name} {value!r}" for name, value in raw.items())
    return link, _item("pcie-link", _link_status(link, problems), _joined(shown, problems), pci)


def _link_status(link: _Link, problems: list[str]) -> decisions.CheckStatus:
    values = (link.link_width, link.max_link_width, link.link_speed_gts, link.max_link_speed_gts)
    match values:
        case (int() as width, int() as most, float() as speed, float() as fastest) if (
            not problems and width <= most  # 63 > 16: an all-ones link status register
        ):
            degraded = width < most or speed < fastest
            return Status.FAIL if degraded else Status.PASS
    return Status.UNKNOWN


def _width(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdecimal() else None


def _speed(text: str | None) -> float | None:
    match = _SPEED.match(text or "")
    return float(match.group(1)) if match else None


# ---- root port -------------------------------------------------------------------------------


def _root_port(root: Path, pci: str) -> tuple[str | None, str | None, str | None]:
    """(root port address, its host path, problem): the first PCI bridge below the host bridge."""
    rel = f"{nvidia.PCI_DEVICES}/{pci}"
    try:
        parts = hostfs.resolve(root, rel).relative_to(root).parts
    except (hostfs.HostReadError, ValueError) as e:
        return None, None, f"{hostfs.shown(rel)}: cannot resolve ({e})"
    for index, part in enumerate(parts[:-1]):
        if _HOST_BRIDGE.match(part):
            below = parts[index + 1]
            if below == parts[-1] or not _PCI_ADDRESS.match(below):
                break
            return below, "/".join(parts[: index + 2]), None
    shown_path = hostfs.shown("/".join(parts))
    return None, None, f"no root port between the host bridge and {pci} in {shown_path}"


def _item(
    name: str, status: decisions.CheckStatus, text: str, gpu: str | None = None
) -> evidence.EvidenceItem:
    return evidence.EvidenceItem(item=name, status=status, evidence=text, gpu=gpu)


def _joined(text: str, problems: Iterable[str]) -> str:
    return "; ".join([text, *problems]) if text else "; ".join(problems)


def _is_nvidia_gpu(root: Path, device: str) -> bool:
    base = f"{nvidia.PCI_DEVICES}/{device}"
    vendor = hostread.read_line(root, f"{base}/vendor").lower()
    if vendor != nvidia.NVIDIA_VENDOR:
        return False
    return hostread.read_line(root, f"{base}/class").lower().startswith(nvidia.DISPLAY_CLASS_PREFIX)
