"""One evidence run on one node: read everything, then judge it (``policy.verdict``).

Order matters for the hardware: sysfs and the kernel log are read first, and only then is
``nvidia-smi`` considered, so that a GPU whose config space reads all ff (or an Xid 79 in the
log) keeps it from ever being started. Nothing here writes under the root.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from gpuguard.agent.evidence import aer, hostread, kernel, pci, smi
from gpuguard.catalog import xid as xid_catalog
from gpuguard.model import evidence, ports, xid
from gpuguard.policy import verdict

HOSTNAME = "etc/hostname"
BOOT_ID = "proc/sys/kernel/random/boot_id"
UNKNOWN_NODE = "<unknown>"


@dataclass(frozen=True, slots=True)
class CollectOptions:
    """What to read: ``node`` overrides /etc/hostname (pass the Kubernetes node name)."""

    node: str | None = None
    kernel_log: kernel.KernelLogOptions = field(default_factory=kernel.KernelLogOptions)
    nvidia_smi: smi.SmiOptions = field(default_factory=smi.SmiOptions)


def collect(
    root: Path,
    options: CollectOptions,
    runner: ports.CommandRunner,
    catalog: xid_catalog.XidCatalog,
    now: datetime,
) -> evidence.EvidenceBundle:
    """The node's evidence bundle, with its verdict."""
    log = kernel.read_events(root, options.kernel_log, runner, now)
    scan = pci.scan_gpus(root)
    gpus = _read_gpus(root, scan.pcis, log.events)
    facts = tuple(read.facts for read in gpus)
    ports_read = _read_root_ports(root, gpus)
    signs = smi.hung_driver_signs(facts, log.events)
    smi_run, smi_item = smi.query(root, options.nvidia_smi, runner, signs)
    bundle = evidence.EvidenceBundle(
        node=options.node or hostread.optional_line(root, HOSTNAME) or UNKNOWN_NODE,
        collected_at=now,
        boot_id=hostread.optional_line(root, BOOT_ID),
        items=(
            log.item,
            kernel.xid_item(log, catalog),
            scan.item,
            *_gpu_items(gpus, ports_read),
            smi_item,
        ),
        xid_events=log.events,
        gpus=facts,
        root_ports=tuple(read.counters for read in ports_read.values()),
        kernel_log=log.log,
        nvidia_smi=smi_run,
    )
    return replace(bundle, verdict=verdict.decide(bundle, catalog))


def _read_gpus(
    root: Path, listed: tuple[str, ...], events: tuple[xid.KernelEvent, ...]
) -> list[pci.GpuRead]:
    uuids = {e.pci: e.uuid for e in events if e.pci is not None and e.uuid is not None}
    reads = [pci.read_gpu(root, address, uuids.get(address)) for address in listed]
    first_seen = {e.pci: e for e in reversed(events) if e.pci is not None}
    for address, event in sorted(first_seen.items()):
        if address not in listed:
            where = f"kernel log line {event.line_no}"
            reads.append(pci.missing_gpu(address, uuids.get(address), where))
    return reads


def _read_root_ports(root: Path, gpus: list[pci.GpuRead]) -> dict[str, aer.PortRead]:
    ports_read: dict[str, aer.PortRead] = {}
    for read in gpus:
        port, port_dir = read.facts.root_port, read.port_dir
        if port is not None and port_dir is not None and port not in ports_read:
            ports_read[port] = aer.read_port(root, port_dir, port)
    return ports_read


def _gpu_items(
    gpus: list[pci.GpuRead], ports_read: dict[str, aer.PortRead]
) -> list[evidence.EvidenceItem]:
    items: list[evidence.EvidenceItem] = []
    for read in gpus:
        items.extend(read.items)
        port = read.facts.root_port
        if port is not None:
            items.append(pci.aer_item(ports_read[port], read.facts.pci))
    return items
