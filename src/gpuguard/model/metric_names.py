"""Names of every metric gpuguard reads or writes, in one place.

Exporter names are dcgm-exporter's and kube-state-metrics' own; ``gpuguard_*`` names are ours.
Alert rules, dashboards, sources and the simulator all use these.
"""

from __future__ import annotations

import re

# dcgm-exporter (see tests/data/reference/dcgm_exporter_counters.md)
DCGM_XID_LAST = "DCGM_FI_DEV_XID_ERRORS"  # gauge: the LAST Xid value, not a count
DCGM_XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"  # optional: count per xid label in a window
DCGM_GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
DCGM_FB_USED = "DCGM_FI_DEV_FB_USED"
DCGM_FB_FREE = "DCGM_FI_DEV_FB_FREE"
DCGM_POWER = "DCGM_FI_DEV_POWER_USAGE"
DCGM_GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"
DCGM_SM_CLOCK = "DCGM_FI_DEV_SM_CLOCK"
DCGM_MEM_CLOCK = "DCGM_FI_DEV_MEM_CLOCK"
DCGM_PSTATE = "DCGM_FI_DEV_PSTATE"
DCGM_SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
DCGM_SM_OCCUPANCY = "DCGM_FI_PROF_SM_OCCUPANCY"
DCGM_TENSOR_ACTIVE = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
DCGM_DRAM_ACTIVE = "DCGM_FI_PROF_DRAM_ACTIVE"
DCGM_GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
DCGM_UNCORRECTABLE_REMAPPED_ROWS = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
DCGM_CORRECTABLE_REMAPPED_ROWS = "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"
DCGM_ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
DCGM_ROW_REMAP_PENDING = "DCGM_FI_DEV_ROW_REMAP_PENDING"
DCGM_ECC_DBE_VOLATILE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
DCGM_PCIE_LINK_GEN = "DCGM_FI_DEV_PCIE_LINK_GEN"
DCGM_PCIE_LINK_WIDTH = "DCGM_FI_DEV_PCIE_LINK_WIDTH"
DCGM_FB_RESERVED = "DCGM_FI_DEV_FB_RESERVED"
DCGM_PCIE_MAX_LINK_GEN = "DCGM_FI_DEV_PCIE_MAX_LINK_GEN"  # DCGM field 235 (custom CSV)
DCGM_PCIE_MAX_LINK_WIDTH = "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH"  # DCGM field 236 (custom CSV)

# kube-state-metrics (see tests/data/reference/kube_state_metrics_sample.txt)
KSM_NODE_CAPACITY = "kube_node_status_capacity"
KSM_NODE_ALLOCATABLE = "kube_node_status_allocatable"
KSM_NODE_UNSCHEDULABLE = "kube_node_spec_unschedulable"
KSM_NODE_CONDITION = "kube_node_status_condition"
KSM_NODE_INFO = "kube_node_info"
KSM_NODE_ANNOTATIONS = "kube_node_annotations"
KSM_POD_INFO = "kube_pod_info"
KSM_POD_REQUESTS = "kube_pod_container_resource_requests"
KSM_POD_PHASE = "kube_pod_status_phase"
KSM_POD_READY = "kube_pod_status_ready"
KSM_CONTAINER_RESTARTS = "kube_pod_container_status_restarts_total"
KSM_CONTAINER_WAITING_REASON = "kube_pod_container_status_waiting_reason"
KSM_NODE_TAINT = "kube_node_spec_taint"
GPU_RESOURCE_LABEL = "nvidia_com_gpu"  # ksm's sanitised form of nvidia.com/gpu

# gpuguard's own
XID_TOTAL = "gpuguard_xid_total"  # agent: counter per {node,gpu,uuid,pci,xid,rule}
XID154_RECOVERY_ACTION = "gpuguard_xid154_recovery_action"  # agent: info-style gauge
SXID_TOTAL = "gpuguard_sxid_total"  # agent: NVSwitch SXid lines per {node,pci,sxid,severity}
XID_RULE_HARDWARE = "gpuguard_xid_rule_hardware"  # agent: 1/0 per {node,rule} it has counted
CHECK_STATUS = "gpuguard_check_status"  # agent: 1 for the current {check,status}
NVML_MISMATCH = "gpuguard_nvml_mismatch"  # agent: 1 when kernel module != NVML library
TICKS_TOTAL = "gpuguard_ticks_total"
TICK_ERRORS_TOTAL = "gpuguard_tick_errors_total"  # labels: kind, step
WRITES_SKIPPED_TOTAL = "gpuguard_writes_skipped_total"  # leadership lapsed during a tick
URGENT_WAKES_TOTAL = "gpuguard_urgent_wakes_total"  # a node newly urgent woke the loop
URGENT_TICKS_TOTAL = "gpuguard_urgent_ticks_total"  # ticks run at once for such wakes
URGENT_REWAKES_TOTAL = "gpuguard_urgent_rewakes_total"  # again: the per-tick limit left some
WATCH_CACHE_SYNCED = "gpuguard_watch_cache_synced"  # gauge per {resource}
WATCH_CACHE_OBJECTS = "gpuguard_watch_cache_objects"  # gauge per {resource}
WATCH_RELISTS_TOTAL = "gpuguard_watch_relists_total"  # per {resource}, the first list included
WATCH_ERRORS_TOTAL = "gpuguard_watch_errors_total"  # per {resource}
WATCH_FALLBACK_LISTS_TOTAL = "gpuguard_watch_fallback_lists_total"  # a tick listed afresh
LAST_SUCCESSFUL_TICK = "gpuguard_last_successful_tick_timestamp_seconds"
DECISIONS_TOTAL = "gpuguard_decisions_total"  # labels: action, reason
BREAKER_OPEN = "gpuguard_breaker_open"
BREAKER_TRIPPED = "gpuguard_breaker_tripped"
BREAKER_LIMIT = "gpuguard_breaker_limit"  # gauge per {limit} (rate, level, burst)
BREAKER_UNCONFIRMED = "gpuguard_breaker_unconfirmed_isolations"  # gauge per {scope}
FAULT_WITHHELD = "gpuguard_fault_withheld"  # gauge per {node, reason}
ISOLATED_NODES = "gpuguard_isolated_nodes"  # gauge per {node, reason}
RETURNED_TOTAL = "gpuguard_nodes_returned_total"  # label: node
REMEDIATIONS_TOTAL = "gpuguard_remediations_total"  # labels: action, result (docs/remediation.md)
RETURN_CHECK_STATUS = "gpuguard_return_check_status"  # labels: node, check, status
PHANTOM_GPUS = "gpuguard_phantom_gpu"  # labels: node, gpu; value: wasted watts
GPU_ISOLATED = "gpuguard_gpu_isolated"  # labels: node, gpu, uuid; value: unix time isolated
GPU_ISOLATION_OVERDUE = "gpuguard_gpu_isolation_overdue"  # node, gpu, uuid: 1 past rma_deadline
CHANGE_NODES = "gpuguard_change_nodes"  # labels: change, phase (model.change.Phase, pending)
CHANGE_STOPPED = "gpuguard_change_stopped"  # labels: change, node, check: 1 while stopped there
GPU_PROCESSES = "gpuguard_gpu_processes"  # agent: processes holding {node,gpu,pci,uuid} open
GPU_PROCESS_SCAN_COMPLETE = "gpuguard_gpu_process_scan_complete"  # agent: 1/0 per node
GPU_POD = "gpuguard_gpu_pod"  # agent (PodResources): 1 per {node,uuid,namespace,pod,container}
POD_RESOURCES_READABLE = "gpuguard_pod_resources_readable"  # agent: 1/0 per node (opt-in)

# Derived series the guard's Prometheus source fetches once per tick (constant query count),
# stored in FleetSnapshot.samples under these names.
XID_LAST_24H_AGO = "DCGM_FI_DEV_XID_ERRORS offset 24h"
DCGM_GPU_PODS = "dcgm gpu pods"  # per GPU a pod holds whose last Xid is 0: its node, GPU, pod
XID_COUNT_RECENT = "DCGM_EXP_XID_ERRORS_COUNT recent"  # sum over the lookback, per xid
XID_TOTAL_RECENT = "gpuguard_xid_total recent"  # increase over the lookback, per xid
FALLEN_OFF_BUS_RECENT = "gpuguard_fallen_off_bus recent"  # increase over the lookback, per pci
FRESHNESS_KSM = "freshness kube-state-metrics"  # newest kube-state-metrics GPU capacity sample
FRESHNESS_DCGM = "freshness dcgm-exporter"  # newest dcgm-exporter sample: stale data fails closed
GPU_LOSS_HELD = "gpu loss held"  # min over the hold window of capacity - allocatable, per node
DCGM_NODE_NEWEST = "dcgm newest sample"  # per node: unix time of its exporter's newest sample
AGENT_NODE_NEWEST = "agent newest sample"  # per node: unix time of its agent's newest sample
FALLEN_OFF_BUS_TOTAL = "gpuguard_gpu_fallen_off_bus_total"  # agent: counter per {node,pci,uuid}

# Per-GPU window statistics of the GPU telemetry plan (sources.gpu_metrics), stored in
# FleetSnapshot-style samples as "<dcgm name> <stat>" (see ``window_stat``).
WINDOW_STATS = ("min", "max", "avg", "last")
GPU_TELEMETRY = (  # the dcgm fields that tell busy from idle, fetched per window
    DCGM_GPU_UTIL,
    DCGM_SM_ACTIVE,
    DCGM_GR_ENGINE_ACTIVE,
    DCGM_DRAM_ACTIVE,
    DCGM_TENSOR_ACTIVE,
    DCGM_SM_OCCUPANCY,
    DCGM_FB_USED,
    DCGM_POWER,
    DCGM_PSTATE,
    DCGM_SM_CLOCK,
)
GPU_SEEN_AT_WINDOW_START = "gpu seen at window start"  # DCGM_FI_DEV_GPU_UTIL offset <window>
NODE_GPU_PODS_MAX = "node gpu pods max"  # most GPUs held by live pods on a node in the window
PHANTOM_SIGNATURE_MINUTES = "phantom signature minutes"  # util >= 95 and FB < 100, 1-min steps
GPU_PROCESSES_MAX = "gpu processes max"  # most processes the agent saw on a GPU in the window
# per node with a GPU that may be phantom: busy over the window on a series without a workload pod
PHANTOM_CANDIDATE_NODES = "phantom candidate nodes"


def ksm_annotation_label(key: str) -> str:
    """The label a node annotation ``key`` gets on ``kube_node_annotations`` when
    kube-state-metrics allow-lists it (``--metric-annotations-allowlist``): ``annotation_``
    and the key with every character outside [a-zA-Z0-9_] as ``_``."""
    return "annotation_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)


def window_stat(metric: str, stat: str) -> str:
    """The sample name of ``stat`` (min/max/avg/last) of ``metric`` over the window."""
    return f"{metric} {stat}"


# the node agent's own (gpuguard agent)
AGENT_KERNEL_LINES_TOTAL = "gpuguard_agent_kernel_lines_total"  # agent: lines read, per node
AGENT_MALFORMED_LINES_TOTAL = "gpuguard_agent_malformed_lines_total"  # agent: unreadable records
AGENT_KERNEL_LOG_READABLE = "gpuguard_agent_kernel_log_readable"  # agent: 0 = cannot read it
AGENT_CONDITION_WRITES_TOTAL = "gpuguard_agent_condition_writes_total"  # agent: by result
AGENT_CHECK_DURATION = "gpuguard_agent_check_duration_seconds"  # agent: last check cycle
AGENT_LAST_CHECK = "gpuguard_agent_last_check_timestamp_seconds"  # agent: end of last cycle

# Scheduling and interconnect health (docs/fleet-health.md). dcgm-exporter field names are
# DCGM's (https://docs.nvidia.com/datacenter/dcgm/latest/dcgm-api/dcgm-api-field-constants.html);
# node_infiniband_* are node-exporter's infiniband collector (labels device, port).
DCGM_CLOCKS_EVENT_REASONS = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"  # bitmask gauge (DCGM 3.3+)
DCGM_CLOCK_THROTTLE_REASONS = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"  # its older name
DCGM_NVLINK_CRC_FLIT = "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"
DCGM_NVLINK_CRC_DATA = "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL"
DCGM_NVLINK_REPLAY = "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"
DCGM_NVLINK_RECOVERY = "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"
DCGM_PCIE_REPLAY = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
IB_LINK_DOWNED = "node_infiniband_link_downed_total"
IB_LINK_ERROR_RECOVERY = "node_infiniband_link_error_recovery_total"
IB_SYMBOL_ERRORS = "node_infiniband_symbol_error_total"
IB_PORT_RCV_ERRORS = "node_infiniband_port_errors_received_total"
GANG_GPU_HOURS_HELD = "gpuguard_gang_gpu_hours_held"  # labels: namespace, job, system
GPU_NVLINK_PEER = "gpuguard_gpu_link"  # agent: 1 per {node, gpu, peer, link} (topo -m cell)
GPU_NUMA_NODE = "gpuguard_gpu_numa_node"  # agent: 1 per {node, gpu, numa}
GPU_TOPOLOGY_READ = "gpuguard_gpu_topology_read"  # agent: 1 read, 0 skipped or failed
GPU_TOPOLOGY_CHANGES = "gpu topology changes"  # per node: its topology series new or gone lately

# Derived series of the interconnect plan (sources.fleet_health), "<what> <window>"
# ("short": the finding window; "long": the persistence window).
THROTTLE_FRACTION = "clock event fraction"  # per GPU and reason label: share of the window
NVLINK_ERRORS_INCREASE = "nvlink errors increase"  # per GPU and counter label
PCIE_REPLAYS_INCREASE = "pcie replays increase"  # per GPU
IB_ERRORS_INCREASE = "infiniband errors increase"  # per node, device, port and counter label
# DCGM_FI_DEV_CLOCKS_EVENT_REASONS bits (DCGM_CLOCKS_EVENT_REASON_*, 1:1 with NVML's
# nvmlClocksEventReason*; https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html).
# Idle (0x1), application clocks (0x2), sync boost (0x10) and display clocks (0x100) are not
# slowdowns and are left out.
CLOCK_EVENT_REASON_BITS = {
    "sw-power-cap": 0x4,
    "hw-slowdown": 0x8,
    "sw-thermal": 0x20,
    "hw-thermal": 0x40,
    "hw-power-brake": 0x80,
}
SHORT, LONG = "short", "long"  # the finding window and the persistence window


def windowed(what: str, window: str) -> str:
    """The sample name of a derived interconnect series over the ``short``/``long`` window."""
    return f"{what} {window}"


def coverage(what: str) -> str:
    """The sample name of how many series a derived interconnect series had in the short
    window before the plan filtered it to the values a finding needs: collected at all."""
    return f"{what} coverage"
GPU_POD_MAPPING = "gpu pod mapping"  # per GPU: dcgm-exporter's series with its pod labels
FLEET_FINDING = "gpuguard_fleet_health_finding"  # 1 per {kind, node, gpu} finding standing now
NODE_PERSISTENTLY_UNHEALTHY = "gpuguard_node_persistently_unhealthy"  # 1 per node, persistent
