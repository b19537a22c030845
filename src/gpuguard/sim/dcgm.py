"""The simulator's dcgm-exporter: a node's GPUs rendered as dcgm /metrics.

It must look like the real exporter where it matters to detection
(tests/data/reference/dcgm_exporter_counters.md): dcgm's exact label set (``Hostname`` or
``hostname``, the 8-digit-domain ``pci_bus_id``, pod labels only on GPUs a pod holds), the XID
series as a sticky *gauge* of the last Xid with ``err_code``/``err_msg`` labels that is absent
until the first Xid after the exporter started, and no telemetry for a GPU that fell off the
bus (only its last Xid series stays, as in the lifecycle report's [docs/design.md#incidents] Xid 79
incident). Rendering is pure: (state, pods, now) in, families out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuguard.model import metric_names as mn
from gpuguard.sim import exposition, profiles, state, store

POD_KIND = "Pod"  # the store's kind name (sim.apiresources)
XID_COUNT_WINDOW = timedelta(minutes=5)  # dcgm-exporter's --xid-count-window-size default
GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class PodRef:
    """The pod dcgm-exporter's Kubernetes mapping attaches to a GPU."""

    namespace: str
    pod: str
    container: str


# dcgm-exporter's err_msg texts (xidErrCodeToText in NVIDIA/dcgm-exporter xid_errors.go).
XID_ERR_MSG: Mapping[int, str] = {
    0: "No Error", 13: "Graphics Engine Exception", 31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors -- Most likely to see when running "
        "multiple cuda",
    48: "Double Bit ECC Error", 61: "Internal micro-controller breakpoint/warning",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure", 68: "NVDEC0 Exception",
    69: "Graphics Engine class error", 74: "NVLINK Error", 79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate", 94: "Contained ECC error",
    95: "Uncontained ECC error", 109: "Context Switch Timeout Error",
    110: "Security Fault Error", 119: "GSP RPC Timeout", 120: "GSP Error",
    121: "C2C Link Error", 136: "ALI Training Fail", 140: "Unrecovered ECC Error",
    143: "GPU Initialization Failure", 154: "GPU Recovery Action Changed",
    156: "Resource Retirement Event", 157: "Resource Retirement Failure",
    158: "GPU Fatal Timeout", 167: "PCIE Fatal Timeout", 171: "Uncorrectable DRAM Error",
    172: "Uncorrectable SRAM Error",
}  # fmt: skip

_PCIE_GEN_BY_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


@dataclass(frozen=True)
class _GpuView:
    """What every dcgm metric of one GPU is computed from."""

    gpu: state.SimGpu
    labels: exposition.Labels  # gpu .. DCGM_FI_DRIVER_VERSION
    attrs: Mapping[str, str]  # pod mapping attributes (sorted into the labels at the end)
    shape: profiles.Shape
    fb_total_mib: int
    fb_reserved_mib: int

    def series(self, extra: Mapping[str, str] | None = None) -> exposition.Labels:
        merged = {**self.attrs, **(extra or {})}
        return self.labels + tuple(sorted(merged.items()))


@dataclass(frozen=True)
class _Field:
    name: str
    kind: str
    help: str
    value: Callable[[_GpuView], float]
    group: str = "default"  # "default" | "prof" (DCP) | "custom" (not in the shipped CSVs)


def _fb_free(v: _GpuView) -> float:
    return max(0.0, v.fb_total_mib - v.fb_reserved_mib - v.shape.fb_used_mib)


def _pcie_gen(v: _GpuView) -> float:
    return _PCIE_GEN_BY_GTS.get(v.gpu.link_speed_gts, 0)


# In the order of etc/default-counters.csv, help texts verbatim; "custom" fields come from a
# cluster's own CSV (PSTATE text as in dcgm-exporter issue #700).
_FIELDS: tuple[_Field, ...] = (
    _Field(mn.DCGM_SM_CLOCK, "gauge", "SM clock frequency (in MHz).",
           lambda v: v.shape.sm_clock_mhz),
    _Field(mn.DCGM_MEM_CLOCK, "gauge", "Memory clock frequency (in MHz).",
           lambda v: v.shape.mem_clock_mhz),
    _Field(mn.DCGM_GPU_TEMP, "gauge", "GPU temperature (in C).", lambda v: v.shape.temp_c),
    _Field(mn.DCGM_POWER, "gauge", "Power draw (in W).", lambda v: v.shape.power_w),
    _Field(mn.DCGM_GPU_UTIL, "gauge", "GPU utilization (in %).", lambda v: v.shape.util_pct),
    _Field(mn.DCGM_FB_FREE, "gauge", "Framebuffer memory free (in MiB).", _fb_free),
    _Field(mn.DCGM_FB_USED, "gauge", "Framebuffer memory used (in MiB).",
           lambda v: v.shape.fb_used_mib),
    _Field(mn.DCGM_FB_RESERVED, "gauge", "Framebuffer memory reserved (in MiB).",
           lambda v: v.fb_reserved_mib),
    _Field(mn.DCGM_UNCORRECTABLE_REMAPPED_ROWS, "counter",
           "Number of remapped rows for uncorrectable errors",
           lambda v: v.gpu.uncorrectable_remapped_rows),
    _Field(mn.DCGM_CORRECTABLE_REMAPPED_ROWS, "counter",
           "Number of remapped rows for correctable errors",
           lambda v: v.gpu.correctable_remapped_rows),
    _Field(mn.DCGM_ROW_REMAP_FAILURE, "gauge", "Whether remapping of rows has failed",
           lambda v: v.gpu.row_remap_failure),
    _Field(mn.DCGM_GR_ENGINE_ACTIVE, "gauge", "Ratio of time the graphics engine is active.",
           lambda v: v.shape.gr_engine_active, "prof"),
    _Field(mn.DCGM_SM_ACTIVE, "gauge", "The ratio of cycles an SM has at least 1 warp assigned.",
           lambda v: v.shape.sm_active, "prof"),
    _Field(mn.DCGM_SM_OCCUPANCY, "gauge", "The ratio of number of warps resident on an SM.",
           lambda v: v.shape.sm_occupancy, "prof"),
    _Field(mn.DCGM_TENSOR_ACTIVE, "gauge", "Ratio of cycles the tensor (HMMA) pipe is active.",
           lambda v: v.shape.tensor_active, "prof"),
    _Field(mn.DCGM_DRAM_ACTIVE, "gauge",
           "Ratio of cycles the device memory interface is active sending or receiving data.",
           lambda v: v.shape.dram_active, "prof"),
    _Field(mn.DCGM_PSTATE, "gauge", "Performance state (P-State) 0-15.",
           lambda v: v.shape.pstate, "custom"),
    _Field(mn.DCGM_ROW_REMAP_PENDING, "gauge", "Whether remapping of rows is pending",
           lambda v: v.gpu.row_remap_pending, "custom"),
    _Field(mn.DCGM_ECC_DBE_VOLATILE, "counter", "Total number of double-bit volatile ECC errors.",
           lambda v: v.gpu.ecc_dbe_volatile, "custom"),
    _Field(mn.DCGM_PCIE_LINK_GEN, "gauge", "PCIe current link generation.", _pcie_gen, "custom"),
    _Field(mn.DCGM_PCIE_LINK_WIDTH, "gauge", "PCIe current link width.",
           lambda v: v.gpu.link_width, "custom"),
)  # fmt: skip


def dcgm_pci(pci: str) -> str:
    """dcgm's ``pci_bus_id`` spelling of a normalised ``dddd:bb:dd.f``: ``00000000:BB:DD.F``."""
    domain, bus, rest = pci.split(":")
    return f"{int(domain, 16):08X}:{bus.upper()}:{rest.upper()}"


def exporter_up(node: state.SimNode, now: datetime) -> bool:
    """Whether the node's dcgm-exporter answers at ``now`` (not while the node is down)."""
    if node.reboot_hung or (node.down_until is not None and now < node.down_until):
        return False
    if node.exporter_down_until is not None and now < node.exporter_down_until:
        return False
    return node.exporter_started is None or node.exporter_started <= now


def active_workloads(node: state.SimNode, now: datetime) -> list[state.Workload]:
    return [w for w in node.workloads if w.started <= now and (w.ends is None or now < w.ends)]


def pods_by_gpu(
    node: state.SimNode, objects: store.ObjectStore | None, now: datetime
) -> dict[int, PodRef]:
    """Which pod holds each GPU at ``now`` (from the node's workloads; container from the
    store's Pod when there is one: its first container requesting nvidia.com/gpu)."""
    held: dict[int, PodRef] = {}
    for w in active_workloads(node, now):
        ref = PodRef(w.namespace, w.pod, _gpu_container(objects, w.namespace, w.pod))
        held.update(dict.fromkeys(w.gpus, ref))
    return held


def _gpu_container(objects: store.ObjectStore | None, namespace: str, pod: str) -> str:
    if objects is None:
        return "main"
    try:
        containers = objects.get(POD_KIND, namespace, pod).get("spec", {}).get("containers", [])
    except store.StoreNotFound:
        return "main"
    for c in containers:
        if GPU_RESOURCE in (c.get("resources", {}).get("requests") or {}):
            return str(c.get("name", "main"))
    return str(containers[0].get("name", "main")) if containers else "main"


def xid_value(node: state.SimNode, gpu: state.SimGpu, now: datetime) -> int | None:
    """The XID gauge's value at ``now``: the last Xid since the exporter started, else None.

    ``xid_history`` decides when it has entries; ``xid_last`` is the fallback for states built
    without a history (hand-made tests, scenario snapshots).
    """
    since = node.exporter_started
    seen = [x for t, x in gpu.xid_history if t <= now and (since is None or t >= since)]
    if seen:
        return seen[-1]
    return None if gpu.xid_history else gpu.xid_last


def xid_counts(node: state.SimNode, gpu: state.SimGpu, now: datetime) -> dict[int, int]:
    """Xids per code in dcgm-exporter's sliding window ending at ``now``."""
    start = now - XID_COUNT_WINDOW
    if node.exporter_started is not None:
        start = max(start, node.exporter_started)
    counts: dict[int, int] = {}
    for t, xid in gpu.xid_history:
        if start <= t <= now:
            counts[xid] = counts.get(xid, 0) + 1
    return counts


def dcgm_families(
    node: state.SimNode,
    pods: Mapping[int, PodRef],
    now: datetime,
    *,
    xid_count_metric: bool = False,
) -> list[exposition.Family]:
    """Every dcgm-exporter family of ``node`` at ``now``.

    A GPU off the bus has no telemetry; only its Xid series may remain (sticky, the lifecycle
    report), unless the node says DCGM cannot report it (``dcgm_keeps_lost_gpu_xid``).
    """
    views = [_view(node, g, pods.get(g.index), now) for g in node.gpus]
    on_bus = [v for v in views if v.gpu.on_bus]
    xid_views = [v for v in views if _shows_xid(node, v.gpu, now)]
    fields = [f for f in _FIELDS if _collected(node, f)]
    families = [_field_family(f, on_bus) for f in fields]
    families.insert(5, _xid_family(node, xid_views, now))  # after GPU_UTIL, as in the CSV
    if xid_count_metric:
        families.append(_xid_count_family(node, xid_views, now))
    return [f for f in families if f.samples]


def render_dcgm(
    node: state.SimNode,
    pods: Mapping[int, PodRef],
    now: datetime,
    *,
    xid_count_metric: bool = False,
) -> str:
    """``node``'s dcgm-exporter /metrics body (Prometheus text format 0.0.4) at ``now``."""
    return exposition.to_text(dcgm_families(node, pods, now, xid_count_metric=xid_count_metric))


def _shows_xid(node: state.SimNode, gpu: state.SimGpu, now: datetime) -> bool:
    if gpu.on_bus:
        return True
    return node.dcgm_keeps_lost_gpu_xid and xid_value(node, gpu, now) is not None


def _collected(node: state.SimNode, f: _Field) -> bool:
    if f.group == "prof":
        return node.profiling_metrics
    if f.group == "custom":
        return node.dcgm_custom_fields
    return True


def _view(node: state.SimNode, gpu: state.SimGpu, pod: PodRef | None, now: datetime) -> _GpuView:
    spec = profiles.spec_for(gpu.model)
    workload = next((w for w in active_workloads(node, now) if gpu.index in w.gpus), None)
    shape = profiles.shape(profiles.activity_of(gpu, workload), spec, gpu.uuid, now)
    return _GpuView(gpu, _base_labels(node, gpu), _pod_attrs(node, pod), shape,
                    spec.fb_total_mib, spec.fb_reserved_mib)  # fmt: skip


def _base_labels(node: state.SimNode, gpu: state.SimGpu) -> exposition.Labels:
    return (
        ("gpu", str(gpu.index)),
        ("UUID", gpu.uuid),
        ("pci_bus_id", dcgm_pci(gpu.pci)),
        ("device", f"nvidia{gpu.index}"),
        ("modelName", gpu.model),
        (node.hostname_label, node.name),
        ("DCGM_FI_DRIVER_VERSION", node.driver_module),
    )


def _pod_attrs(node: state.SimNode, pod: PodRef | None) -> dict[str, str]:
    if pod is not None:  # the GPU Operator's exporter adds pod_uid="" (reference sample 1)
        return {"container": pod.container, "namespace": pod.namespace, "pod": pod.pod,
                "pod_uid": ""}  # fmt: skip
    if node.dcgm_empty_pod_labels:
        return {"container": "", "namespace": "", "pod": ""}
    return {}


def _field_family(f: _Field, views: Sequence[_GpuView]) -> exposition.Family:
    samples = (
        exposition.Sample(v.series(), v.gpu.metric_overrides.get(f.name, f.value(v))) for v in views
    )
    return exposition.Family(f.name, f.kind, f.help, tuple(samples))


def _xid_family(node: state.SimNode, views: Sequence[_GpuView], now: datetime) -> exposition.Family:
    samples = []
    for v in views:
        xid = xid_value(node, v.gpu, now)
        if xid is None and node.xid_gauge_zero:
            xid = 0
        if xid is not None:
            extra = {"err_code": str(xid), "err_msg": _err_msg(v.gpu, xid)}
            samples.append(exposition.Sample(v.series(extra), xid))
    return exposition.Family(mn.DCGM_XID_LAST, "gauge", "Value of the last XID error encountered.",
                             tuple(samples))  # fmt: skip


def _err_msg(gpu: state.SimGpu, xid: int) -> str:
    if xid in XID_ERR_MSG:
        return XID_ERR_MSG[xid]
    return gpu.xid_last_msg if gpu.xid_last == xid and gpu.xid_last_msg else "Unknown Error"


def _xid_count_family(
    node: state.SimNode, views: Sequence[_GpuView], now: datetime
) -> exposition.Family:
    window = {"window_size_in_ms": str(int(XID_COUNT_WINDOW.total_seconds() * 1000))}
    samples = []
    for v in views:
        counts = xid_counts(node, v.gpu, now)
        if not counts:  # the real exporter's "nothing in the window" series: no xid label
            samples.append(exposition.Sample(v.series(window), 0))
        for xid, n in sorted(counts.items()):
            samples.append(exposition.Sample(v.series({**window, "xid": str(xid)}), n))
    return exposition.Family(mn.DCGM_XID_COUNT, "counter", "reported XIDs during last window",
                             tuple(samples))  # fmt: skip
