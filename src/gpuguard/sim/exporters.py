"""The simulator's dcgm-exporter and kube-state-metrics: world state rendered as /metrics.

gpuguard reads the world only through these (and the API server), so they must look like the
real exporters where it matters to detection (shared/data/dcgm_exporter_counters.md,
kube_state_metrics_sample.txt): dcgm's exact label set (``Hostname`` or ``hostname``, the
8-digit-domain ``pci_bus_id``, pod labels only on GPUs a pod holds), the XID series as a sticky
*gauge* of the last Xid with ``err_code``/``err_msg`` labels that is absent until the first
Xid after the exporter started, no telemetry for a GPU that fell off the bus (only its last
Xid series stays, as in seed 004's Xid 79 incident), and ksm's sanitised
``resource="nvidia_com_gpu",unit="integer"``. Rendering is pure: (state, store, now)
in, families out; ``metrics_server`` serves them and ``history`` records them for backfill.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gpuguard.model import metric_names as mn
from gpuguard.sim import profiles, state, store

Labels = tuple[tuple[str, str], ...]
NODE_KIND = "Node"  # the store's kind names (sim.apiresources)
POD_KIND = "Pod"
XID_COUNT_WINDOW = timedelta(minutes=5)  # dcgm-exporter's --xid-count-window-size default
GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class Sample:
    labels: Labels
    value: float


@dataclass(frozen=True)
class Family:
    """One metric family: the HELP/TYPE header and its samples (all named ``name``)."""

    name: str
    kind: str  # "gauge" or "counter" (as the real exporter declares it)
    help: str
    samples: tuple[Sample, ...]


@dataclass(frozen=True)
class PodRef:
    """The pod dcgm-exporter's Kubernetes mapping attaches to a GPU."""

    namespace: str
    pod: str
    container: str


# --------------------------------------------------------------------------- dcgm-exporter

# dcgm-exporter's err_msg texts (xidErrCodeToText at HEAD, shared/data/dcgm_exporter_counters.md).
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
    labels: Labels  # gpu .. DCGM_FI_DRIVER_VERSION
    attrs: Mapping[str, str]  # pod mapping attributes (sorted into the labels at the end)
    shape: profiles.Shape
    fb_total_mib: int
    fb_reserved_mib: int

    def series(self, extra: Mapping[str, str] | None = None) -> Labels:
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
) -> list[Family]:
    """Every dcgm-exporter family of ``node`` at ``now``.

    A GPU off the bus has no telemetry; only its Xid series may remain (sticky, seed 004),
    unless the node says DCGM cannot report it (``dcgm_keeps_lost_gpu_xid``).
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
    return to_text(dcgm_families(node, pods, now, xid_count_metric=xid_count_metric))


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


def _base_labels(node: state.SimNode, gpu: state.SimGpu) -> Labels:
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
    if pod is not None:  # the GPU Operator's exporter adds pod_uid="" (shared/data sample 1)
        return {"container": pod.container, "namespace": pod.namespace, "pod": pod.pod,
                "pod_uid": ""}  # fmt: skip
    if node.dcgm_empty_pod_labels:
        return {"container": "", "namespace": "", "pod": ""}
    return {}


def _field_family(f: _Field, views: Sequence[_GpuView]) -> Family:
    samples = (Sample(v.series(), v.gpu.metric_overrides.get(f.name, f.value(v))) for v in views)
    return Family(f.name, f.kind, f.help, tuple(samples))


def _xid_family(node: state.SimNode, views: Sequence[_GpuView], now: datetime) -> Family:
    samples = []
    for v in views:
        xid = xid_value(node, v.gpu, now)
        if xid is not None:
            extra = {"err_code": str(xid), "err_msg": _err_msg(v.gpu, xid)}
            samples.append(Sample(v.series(extra), xid))
    return Family(mn.DCGM_XID_LAST, "gauge", "Value of the last XID error encountered.",
                  tuple(samples))  # fmt: skip


def _err_msg(gpu: state.SimGpu, xid: int) -> str:
    if xid in XID_ERR_MSG:
        return XID_ERR_MSG[xid]
    return gpu.xid_last_msg if gpu.xid_last == xid and gpu.xid_last_msg else "Unknown Error"


def _xid_count_family(node: state.SimNode, views: Sequence[_GpuView], now: datetime) -> Family:
    window = {"window_size_in_ms": str(int(XID_COUNT_WINDOW.total_seconds() * 1000))}
    samples = []
    for v in views:
        counts = xid_counts(node, v.gpu, now)
        if not counts:  # the real exporter's "nothing in the window" series: no xid label
            samples.append(Sample(v.series(window), 0))
        for xid, n in sorted(counts.items()):
            samples.append(Sample(v.series({**window, "xid": str(xid)}), n))
    return Family(mn.DCGM_XID_COUNT, "counter", "reported XIDs during last window",
                  tuple(samples))  # fmt: skip


# ---------------------------------------------------------------------- kube-state-metrics

_PHASES = ("Pending", "Succeeded", "Failed", "Unknown", "Running")
_CONDITION_STATUSES = ("true", "false", "unknown")
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)([a-zA-Z]*)$")
_QUANTITY_SUFFIX = {
    "": 1.0, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
    "P": 1e15, "E": 1e18, "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40,
    "Pi": 2.0**50, "Ei": 2.0**60,
}  # fmt: skip
_HELP = {
    mn.KSM_NODE_INFO: "[STABLE] Information about a cluster node.",
    mn.KSM_NODE_UNSCHEDULABLE: "[STABLE] Whether a node can schedule new pods.",
    mn.KSM_NODE_ALLOCATABLE: "[STABLE] The allocatable for different resources of a node that "
    "are available for scheduling.",
    mn.KSM_NODE_CAPACITY: "[STABLE] The capacity for different resources of a node.",
    mn.KSM_NODE_CONDITION: "[STABLE] The condition of a cluster node.",
    mn.KSM_NODE_TAINT: "[STABLE] The taint of a cluster node.",
    mn.KSM_NODE_ANNOTATIONS: "Kubernetes annotations converted to Prometheus labels.",
    mn.KSM_POD_INFO: "[STABLE] Information about pod.",
    mn.KSM_POD_PHASE: "[STABLE] The pods current phase.",
    mn.KSM_POD_READY: "[STABLE] Describes whether the pod is ready to serve requests.",
    mn.KSM_POD_REQUESTS: "The number of requested request resource by a container. It is "
    "recommended to use the kube_pod_resource_requests metric exposed by kube-scheduler "
    "instead, as it is more precise.",
    mn.KSM_CONTAINER_RESTARTS: "[STABLE] The number of container restarts per container.",
    mn.KSM_CONTAINER_WAITING_REASON: "[STABLE] Describes the reason the container is currently "
    "in waiting state.",
}
# Annotations exported as kube_node_annotations labels, as with ksm's
# --metric-annotations-allowlist=nodes=[gpuguard.io/...] (prefixes).
ANNOTATION_ALLOWLIST = ("gpuguard.io/",)

Obj = dict[str, Any]
_Rows = Callable[[Obj], Iterable[tuple[Labels, float]]]


def parse_quantity(text: str) -> float:
    """A Kubernetes resource quantity ("8", "500m", "64Gi", "1e3") as a float."""
    match = _QUANTITY.match(str(text).strip())
    if match is None or match[2] not in _QUANTITY_SUFFIX:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    return float(match[1]) * _QUANTITY_SUFFIX[match[2]]


def sanitize(name: str) -> str:
    """ksm's label-value/name sanitising: every character outside [a-zA-Z0-9_] becomes _."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def resource_unit(resource: str) -> str:
    if resource == "cpu":
        return "core"
    if resource in ("memory", "ephemeral-storage", "storage") or resource.startswith("hugepages-"):
        return "byte"
    return "integer"


def ksm_families(objects: store.ObjectStore, now: datetime) -> list[Family]:
    """kube-state-metrics' node and pod families for the store's objects at ``now``."""
    del now  # ksm reports current object state; the argument keeps every exporter alike
    nodes = objects.list(NODE_KIND)
    pods = objects.list(POD_KIND)
    families = [_node_family(name, rows, nodes) for name, rows in _NODE_ROWS]
    families += [_pod_family(name, rows, pods) for name, rows in _POD_ROWS]
    return [f for f in families if f.samples]


def render_ksm(objects: store.ObjectStore, now: datetime) -> str:
    """kube-state-metrics' /metrics body (Prometheus text format 0.0.4) at ``now``."""
    return to_text(ksm_families(objects, now))


def _name(obj: Obj) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


def _node_family(name: str, rows: _Rows, nodes: Sequence[Obj]) -> Family:
    samples = [
        Sample((("node", _name(n)), *labels), value) for n in nodes for labels, value in rows(n)
    ]
    return Family(name, "gauge", _HELP[name], tuple(samples))


def _node_info(node: Obj) -> Iterable[tuple[Labels, float]]:
    info = node.get("status", {}).get("nodeInfo", {})
    spec = node.get("spec", {})
    ip = next((a.get("address", "") for a in node.get("status", {}).get("addresses", [])
               if a.get("type") == "InternalIP"), "")  # fmt: skip
    yield (
        (
            ("container_runtime_version", str(info.get("containerRuntimeVersion", ""))),
            ("kernel_version", str(info.get("kernelVersion", ""))),
            ("kubelet_version", str(info.get("kubeletVersion", ""))),
            ("kubeproxy_version", "deprecated"),
            ("os_image", str(info.get("osImage", ""))),
            ("pod_cidr", str(spec.get("podCIDR", ""))),
            ("provider_id", str(spec.get("providerID", ""))),
            ("internal_ip", str(ip)),
            ("system_uuid", str(info.get("systemUUID", ""))),
        ),
        1,
    )


def _node_unschedulable(node: Obj) -> Iterable[tuple[Labels, float]]:
    yield (), 1 if node.get("spec", {}).get("unschedulable") else 0


def _node_resources(key: str) -> _Rows:
    def rows(node: Obj) -> Iterable[tuple[Labels, float]]:
        for resource, qty in sorted((node.get("status", {}).get(key) or {}).items()):
            labels = (("resource", sanitize(resource)), ("unit", resource_unit(resource)))
            yield labels, parse_quantity(qty)

    return rows


def _node_conditions(node: Obj) -> Iterable[tuple[Labels, float]]:
    for cond in node.get("status", {}).get("conditions", []):
        have = str(cond.get("status", "Unknown")).lower()
        for status in _CONDITION_STATUSES:
            yield (
                (("condition", str(cond.get("type", ""))), ("status", status)),
                int(have == status),
            )


def _node_taints(node: Obj) -> Iterable[tuple[Labels, float]]:
    for taint in node.get("spec", {}).get("taints") or []:
        yield (
            (
                ("key", str(taint.get("key", ""))),
                ("value", str(taint.get("value", ""))),
                ("effect", str(taint.get("effect", ""))),
            ),
            1,
        )


def _node_annotations(node: Obj) -> Iterable[tuple[Labels, float]]:
    annotations = node.get("metadata", {}).get("annotations") or {}
    kept = sorted(
        ("annotation_" + sanitize(k), str(v))
        for k, v in annotations.items()
        if k.startswith(ANNOTATION_ALLOWLIST)
    )
    yield tuple(kept), 1


_NODE_ROWS: tuple[tuple[str, _Rows], ...] = (
    (mn.KSM_NODE_ANNOTATIONS, _node_annotations),
    (mn.KSM_NODE_INFO, _node_info),
    (mn.KSM_NODE_TAINT, _node_taints),
    (mn.KSM_NODE_UNSCHEDULABLE, _node_unschedulable),
    (mn.KSM_NODE_ALLOCATABLE, _node_resources("allocatable")),
    (mn.KSM_NODE_CAPACITY, _node_resources("capacity")),
    (mn.KSM_NODE_CONDITION, _node_conditions),
)


def _pod_family(name: str, rows: _Rows, pods: Sequence[Obj]) -> Family:
    samples = [Sample((*_pod_id(p), *labels), value) for p in pods for labels, value in rows(p)]
    kind = "counter" if name == mn.KSM_CONTAINER_RESTARTS else "gauge"
    return Family(name, kind, _HELP[name], tuple(samples))


def _pod_id(pod: Obj) -> Labels:
    meta = pod.get("metadata", {})
    return (
        ("namespace", str(meta.get("namespace", ""))),
        ("pod", str(meta.get("name", ""))),
        ("uid", str(meta.get("uid", ""))),
    )


def _pod_info(pod: Obj) -> Iterable[tuple[Labels, float]]:
    spec, status = pod.get("spec", {}), pod.get("status", {})
    owners = pod.get("metadata", {}).get("ownerReferences") or [{}]
    yield (
        (
            ("host_ip", str(status.get("hostIP", ""))),
            ("pod_ip", str(status.get("podIP", ""))),
            ("node", str(spec.get("nodeName", ""))),
            ("created_by_kind", str(owners[0].get("kind", "<none>"))),
            ("created_by_name", str(owners[0].get("name", "<none>"))),
            ("priority_class", str(spec.get("priorityClassName", ""))),
            ("host_network", "true" if spec.get("hostNetwork") else "false"),
        ),
        1,
    )


def _pod_phase(pod: Obj) -> Iterable[tuple[Labels, float]]:
    phase = pod.get("status", {}).get("phase")
    if phase:
        for p in _PHASES:
            yield (("phase", p),), int(p == phase)


def _pod_ready(pod: Obj) -> Iterable[tuple[Labels, float]]:
    for cond in pod.get("status", {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            have = str(cond.get("status", "Unknown")).lower()
            for status in _CONDITION_STATUSES:
                yield (("condition", status),), int(have == status)


def _pod_requests(pod: Obj) -> Iterable[tuple[Labels, float]]:
    node = str(pod.get("spec", {}).get("nodeName", ""))
    for c in pod.get("spec", {}).get("containers", []):
        for resource, qty in sorted((c.get("resources", {}).get("requests") or {}).items()):
            yield (
                (
                    ("container", str(c.get("name", ""))),
                    ("node", node),
                    ("resource", sanitize(resource)),
                    ("unit", resource_unit(resource)),
                ),
                parse_quantity(qty),
            )


def _container_restarts(pod: Obj) -> Iterable[tuple[Labels, float]]:
    for cs in pod.get("status", {}).get("containerStatuses") or []:
        yield (("container", str(cs.get("name", ""))),), float(cs.get("restartCount", 0))


def _container_waiting(pod: Obj) -> Iterable[tuple[Labels, float]]:
    for cs in pod.get("status", {}).get("containerStatuses") or []:
        reason = (cs.get("state", {}).get("waiting") or {}).get("reason")
        if reason:
            yield (("container", str(cs.get("name", ""))), ("reason", str(reason))), 1


_POD_ROWS: tuple[tuple[str, _Rows], ...] = (
    (mn.KSM_POD_INFO, _pod_info),
    (mn.KSM_POD_PHASE, _pod_phase),
    (mn.KSM_POD_READY, _pod_ready),
    (mn.KSM_POD_REQUESTS, _pod_requests),
    (mn.KSM_CONTAINER_RESTARTS, _container_restarts),
    (mn.KSM_CONTAINER_WAITING_REASON, _container_waiting),
)


# ------------------------------------------------------------------------------ exposition


def to_text(families: Iterable[Family]) -> str:
    """Prometheus text exposition 0.0.4: ``# HELP``, ``# TYPE``, then the samples."""
    lines: list[str] = []
    for f in families:
        lines.append(f"# HELP {f.name} {escape_help(f.help)}")
        lines.append(f"# TYPE {f.name} {f.kind}")
        lines.extend(f"{f.name}{format_labels(s.labels)} {format_value(s.value)}"
                     for s in f.samples)  # fmt: skip
    return "\n".join(lines) + "\n" if lines else ""


def format_labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{escape_label(v)}"' for k, v in labels) + "}"


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    """Integers without a decimal point (as the exporters print them), else Python's repr."""
    if math.isfinite(value) and float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))
