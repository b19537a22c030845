"""The world's mutable state: nodes, GPUs and their hardware/host facts.

Scenario events change this state (``sim.world``); exporters render it as metrics
(``sim.exporters``); host trees are written from it (``sim.hosts``); the Kubernetes objects
(Node spec/metadata, Pods, Jobs, ...) live in the API server's store (``sim.store``), which the
world keeps in step with ``SimNode`` (capacity, allocatable, boot ID, conditions).
"""

from __future__ import annotations

import uuid as uuidlib
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum


class WorkloadProfile(StrEnum):
    TRAINING = "training"
    SMALL_COMPUTE = "small_compute"
    IDLE = "idle"


@dataclass
class Workload:
    """Pods with GPU requests on some GPUs of a node, and the metric shape they produce."""

    pod: str
    namespace: str
    gpus: tuple[int, ...]
    profile: WorkloadProfile
    started: datetime
    ends: datetime | None


@dataclass
class SimGpu:
    index: int
    uuid: str
    pci: str  # normalised dddd:bb:dd.f
    model: str
    on_bus: bool = True  # False after fallen-off-the-bus: config space reads all ff
    registered: bool = True  # enumerated by the device plugin at its start (capacity)
    offered: bool = True  # the device plugin reports it healthy (allocatable)
    xid_last: int | None = None  # dcgm-exporter's DCGM_FI_DEV_XID_ERRORS gauge (None: no series)
    xid_last_msg: str = ""
    xid_history: list[tuple[datetime, int]] = field(default_factory=list)  # every Xid, ever
    uncorrectable_remapped_rows: int = 0
    correctable_remapped_rows: int = 0
    row_remap_pending: int = 0
    row_remap_failure: int = 0
    phantom: bool = False
    link_width: int = 16
    link_width_max: int = 16
    link_speed_gts: float = 32.0
    link_speed_max_gts: float = 32.0


@dataclass
class SimNode:
    name: str
    boot_id: str
    driver_module: str  # /sys/module/nvidia/version (loaded kernel module)
    driver_library: str  # libnvidia-ml.so.<version> on disk
    kernel_release: str = "6.8.0-45-generic"
    gpus: list[SimGpu] = field(default_factory=list)
    ready: bool = True
    ipvs_persisted: bool = True
    ipvs_loaded: bool = True
    kube_proxy_ready: bool = True
    dns_servers: tuple[str, ...] = ("10.0.0.2",)
    hostname_label: str = "Hostname"  # dcgm-exporter's spelling: "Hostname" or "hostname"
    exporter_started: datetime | None = None
    allocatable_dip_until: datetime | None = None  # MIG reconfig / driver reload dips
    gfd_restarts: int = 0
    kernel_log: list[str] = field(default_factory=list)
    workloads: list[Workload] = field(default_factory=list)

    @property
    def gpu_capacity(self) -> int:
        return sum(1 for g in self.gpus if g.registered)

    @property
    def gpu_allocatable(self) -> int:
        return sum(1 for g in self.gpus if g.registered and g.offered)

    def gpu(self, index: int) -> SimGpu:
        for g in self.gpus:
            if g.index == index:
                return g
        raise KeyError(f"{self.name} has no GPU {index}")


@dataclass(frozen=True)
class TimelineEntry:
    """One line of the world's timeline (what happened, to whom, when)."""

    t: float  # seconds since the scenario started
    kind: str
    node: str | None
    detail: str = ""


def new_uuid(rng_seed: str) -> str:
    """A stable GPU-<uuid> from a seed string, so runs are reproducible."""
    return "GPU-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, rng_seed))


def new_boot_id(rng_seed: str) -> str:
    return str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, rng_seed))
