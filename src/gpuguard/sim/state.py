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
    throughput_share: float = 0.9  # of the model's dense throughput a matmul reaches (gpu_slow)
    row_remap_failure: int = 0
    phantom: bool = False
    # nvidia-smi --query-gpu: gpu_recovery_action (Xid 154's state, until the repair) and the
    # NVLink fabric registration (fabric.state, fabric.status; "N/A" without a fabric)
    recovery_action: str = "None"
    fabric_state: str = "N/A"
    fabric_status: str = "N/A"
    link_width: int = 16
    link_width_max: int = 16
    link_speed_gts: float = 32.0
    link_speed_max_gts: float = 32.0
    # Added for the exporters (sim.exporters):
    ecc_dbe_volatile: int = 0  # DCGM_FI_DEV_ECC_DBE_VOL_TOTAL (reset by a driver reload)
    # nvidia-smi -c: DEFAULT or PROHIBITED. NVML: "not persistent across reboots and always
    # resets to Default" (nvmlDeviceSetComputeMode); a GPU reset re-initialises it as well.
    compute_mode: str = "DEFAULT"
    metric_overrides: dict[str, float] = field(default_factory=dict)  # dcgm name -> value
    # Added for fleet health (sim.fleet_view): spans in time, so any past instant renders
    clock_events: list[tuple[datetime, datetime, int]] = field(default_factory=list)  # bits
    nvlink_errors: list[tuple[datetime, datetime, float, str]] = field(default_factory=list)


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
    bmc: str = "answers"  # how its BMC answers a power cycle (sim.bmc)
    gpu_reset: str = "answers"  # how its GPUs answer nvidia-smi -r (demo.job_commands)
    ipvs_loaded: bool = True
    kube_proxy_ready: bool = True
    dns_servers: tuple[str, ...] = ("10.0.0.2",)
    hostname_label: str = "Hostname"  # dcgm-exporter's spelling: "Hostname" or "hostname"
    exporter_started: datetime | None = None
    allocatable_dip_until: datetime | None = None  # MIG reconfig / driver reload dips
    gfd_restarts: int = 0
    kernel_log: list[str] = field(default_factory=list)
    workloads: list[Workload] = field(default_factory=list)
    # Added for the world (sim.world) and host trees (sim.hosts):
    kubelet_version: str = "v1.34.3+rke2r1"
    resolv_stub: bool = True  # /etc/resolv.conf -> 127.0.0.53, upstreams in /run/systemd/resolve
    auto_upgrades: bool = False  # APT::Periodic::Unattended-Upgrade "1"
    nvidia_blacklisted: bool = False  # nvidia-/libnvidia- in Unattended-Upgrade::Package-Blacklist
    packages_held: bool = False  # kernel and NVIDIA packages on apt-mark hold
    rke2_units: tuple[str, ...] = ("rke2-agent",)  # enabled in multi-user.target.wants
    swap_enabled: bool = False
    ipvs_module_available: bool = True  # ip_vs.ko listed in modules.dep of the running kernel
    pending_kernel_release: str | None = None  # installed, boots at the next reboot
    down_until: datetime | None = None  # rebooting: NotReady until then
    reboot_hung: bool = False  # warm reboot stuck on a GPU off the bus: down until power cycle
    allocatable_dip_gpus: int = 0  # GPUs withheld during allocatable_dip_until (0: all)
    booted_at: datetime | None = None  # kernel uptime stamps count from here
    exporter_down_until: datetime | None = None  # exporter_down: dcgm-exporter does not answer
    # Per-GPU advertising (docs/gpu-isolation.md): which device-plugin instance runs on the
    # node — "cluster" (the cluster's DaemonSet: every GPU on the bus) or "excluding:0-2-3"
    # (the chart's per-node instance selected by the node labels
    # gpuguard.io/device-plugin=excluding and gpuguard.io/device-plugin-visible=0-2-3, which
    # sees those GPU indices) — and the host's list of isolated UUIDs that the isolation Job
    # writes (/etc/gpuguard/excluded-gpus: on disk, so it outlives a reboot).
    plugin_instance: str = "cluster"
    gpu_operator: bool = False  # the GPU Operator manages the node (sim/gpu_operator.py)
    excluded_uuids: set[str] = field(default_factory=set)
    host_jobs: dict[str, int] = field(default_factory=dict)  # running host jobs -> GPU index
    # NVreg_ExcludedGpus in /etc/modprobe.d (configured) and as the module loaded it at the
    # last boot (active): the driver does not attach those GPUs (nv-reg.h: "cannot be
    # attached or used"), so neither NVML nor the device plugin see them.
    nvreg_configured: set[str] = field(default_factory=set)
    nvreg_active: set[str] = field(default_factory=set)
    ib_link_downs: list[tuple[datetime, str]] = field(default_factory=list)  # (when, device/port)

    # Added for the exporters (sim.exporters): what this node's dcgm-exporter collects.
    profiling_metrics: bool = True  # DCGM_FI_PROF_* (DCP) fields; off where DCP is unsupported
    dcgm_custom_fields: bool = True  # custom CSV: SM_ACTIVE/OCCUPANCY, PSTATE, remap pending, PCIe
    xid_count_metric: bool = False  # DCGM_EXP_XID_ERRORS_COUNT (commented out by default)
    # A GPU without an Xid since the exporter started: no XID series (dcgm-exporter 4.4.1-4.8.1,
    # issue #646), or 0 with err_code="0" (before and from 4.8.4; the reference sample in
    # tests/data/reference/dcgm_exporter_counters.md).
    xid_gauge_zero: bool = False
    dcgm_empty_pod_labels: bool = False  # old exporters: container="",namespace="",pod=""
    # A GPU off the bus keeps its last Xid series (the lifecycle report [docs/design.md#incidents]:
    # the 79 series appears and stays); False: nothing at all for it (DCGM#162: NVML cannot report
    # Xid 79/119/120).
    dcgm_keeps_lost_gpu_xid: bool = True

    @property
    def gpu_capacity(self) -> int:
        return sum(1 for g in self.gpus if g.registered)

    @property
    def gpu_allocatable(self) -> int:
        return sum(1 for g in self.gpus if g.registered and g.offered)

    def gpu_allocatable_at(self, now: datetime) -> int:
        """Allocatable as the kubelet reports it at ``now``: fewer GPUs during a dip."""
        if self.allocatable_dip_until is not None and now < self.allocatable_dip_until:
            withheld = self.allocatable_dip_gpus or self.gpu_allocatable
            return max(0, self.gpu_allocatable - withheld)
        return self.gpu_allocatable

    def workload_on(self, index: int) -> Workload | None:
        """The running workload holding GPU ``index``, if any."""
        return next((w for w in self.workloads if index in w.gpus), None)

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
