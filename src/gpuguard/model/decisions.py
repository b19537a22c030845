"""What policies return: actions to take and findings to report, each with a reason (a
str-enum, never a loose string) and the evidence it rests on (series, values, timestamps)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum


class CheckStatus(StrEnum):
    """Three-way (plus WARN and FIXED) result of any check: UNKNOWN is never PASS."""

    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    UNKNOWN = "UNKNOWN"
    FIXED = "FIXED"


class Verdict(StrEnum):
    """The repair a fault needs, in the seed's order of precedence."""

    POWER_CYCLE = "power-cycle"
    GPU_RESET = "gpu-reset"
    RMA = "rma"
    HUMAN_DIAGNOSIS = "human-diagnosis"


class Reason(StrEnum):
    """Why an action was taken, withheld, or a finding raised."""

    HARDWARE_XID_WITH_GPU_LOSS = "hardware-xid-with-gpu-loss"
    FAST_PATH = "fast-path"
    FABRIC_FAULT_HELD = "fabric-fault-held"  # a fatal SXid / failed fabric held the hold window
    HARDWARE_XID_HOLDING = "hardware-xid-holding"
    HARDWARE_XID_WITHOUT_GPU_LOSS = "hardware-xid-without-gpu-loss"
    GPU_LOSS_WITHOUT_XID = "gpu-loss-without-xid"
    HUMAN_CORDON = "human-cordon"
    BREAKER_TRIPPED = "breaker-tripped"
    BREAKER_RATE = "breaker-rate"
    BREAKER_LEVEL = "breaker-level"
    WITHHELD_CLEARED = "withheld-cleared"
    BREAKER_RESET = "breaker-reset"
    ESCALATED = "escalated"
    FAULT_RECORDED = "fault-recorded"
    FORGED_SERIES = "forged-series"  # a scrape target exported a series for another node
    MARKS_NOT_GPUGUARDS = "marks-not-gpuguards"  # gpuguard.io/isolated-at written by another
    TICK_LIMIT = "tick-limit"
    SOURCE_ERROR = "source-error"
    ALREADY_ISOLATED = "already-isolated"
    UNCORRECTABLE_REMAP = "uncorrectable-remap"
    ROW_REMAP_FAILURE = "row-remap-failure"
    PHANTOM_UTILIZATION = "phantom-utilization"
    EXPORTER_SILENT = "exporter-silent"  # a node's dcgm-exporter stopped answering
    AGENT_SILENT = "agent-silent"  # a node's gpuguard agent stopped answering
    RETURN_CONDITIONS_MET = "return-conditions-met"
    RETURN_BLOCKED = "return-blocked"
    HUMAN_UNCORDONED = "human-uncordoned"
    EVIDENCE_REQUESTED = "evidence-requested"
    VERDICT_RECORDED = "verdict-recorded"
    NOT_ISOLATED = "not-isolated"
    RETURN_DATA_MISSING = "return-data-missing"
    BURN_IN_RUNNING = "burn-in-running"
    BURN_IN_PASSED = "burn-in-passed"
    BURN_IN_FAILED = "burn-in-failed"
    # GPU or node (docs/gpu-isolation.md; policy.gpu_scope)
    GPU_SCOPED_FAULT = "gpu-scoped-fault"
    GPU_ISOLATION_OFF = "gpu-isolation-off"
    NEEDS_POWER_CYCLE = "needs-power-cycle"
    SEVERAL_GPUS = "several-gpus"
    FABRIC_FAULT = "fabric-fault"
    NODE_SCOPED_XID = "node-scoped-xid"
    GPU_UNIDENTIFIED = "gpu-unidentified"
    SLOT_REPEATS = "slot-repeats"
    SLOT_HISTORY_UNKNOWN = "slot-history-unknown"
    NO_GPU_LEFT = "no-gpu-left"
    GPU_ISOLATION_APPLIED = "gpu-isolation-applied"
    GPU_ISOLATION_REAPPLIED = "gpu-isolation-reapplied"
    GPU_ISOLATION_FAILED = "gpu-isolation-failed"
    GPU_RETURNED = "gpu-returned"
    GPU_PODS_EVICTED = "gpu-pods-evicted"  # opt-in: the pods on an isolated GPU evicted
    GPU_DRA_TAINTED = "gpu-dra-tainted"  # DRA: a DeviceTaintRule keeps claims off the GPU
    GPU_DRA_UNTAINTED = "gpu-dra-untainted"  # DRA: the GPU's DeviceTaintRule removed
    GPU_RETURN_CHECKED = "gpu-return-checked"  # history and row remap pass: its burn-in next
    GPU_RETURN_FAILED = "gpu-return-failed"  # row remap pending or its burn-in failed: held
    # Utilization diagnosis of GPUs held by pods (docs/design.md#what-utilisation-means;
    # policy.utilization)
    TENSOR_IDLE = "tensor-idle"
    MEMORY_BOUND = "memory-bound"
    LOW_OCCUPANCY = "low-occupancy"
    HEALTHY_BUSY = "healthy-busy"
    LIGHTLY_USED = "lightly-used"
    IDLE_EXPENSIVE = "idle-expensive"
    PROFILING_METRICS_MISSING = "profiling-metrics-missing"
    # Workload hygiene against orphaned CUDA contexts (the phantom incident's defence layers,
    # docs/design.md#incidents; policy.hygiene)
    RAYJOB_KEEPS_CLUSTER = "rayjob-keeps-cluster"
    SHORT_GRACE_PERIOD = "short-grace-period"
    NCCL_HANG_UNBOUNDED = "nccl-hang-unbounded"
    # Change rollouts (docs/change-management.md; policy.rollout)
    CHANGE_STEP = "change-step"
    CHANGE_FAILED = "change-failed"
    # Scheduling and interconnect health (docs/fleet-health.md; policy.gang, policy.topology,
    # policy.interconnect): findings only, never an action on a workload
    GANG_PARTIAL_ALLOCATION = "gang-partial-allocation"
    GANG_SCHEDULING_MISSING = "gang-scheduling-missing"
    TOPOLOGY_MISMATCH = "topology-mismatch"
    GPU_THROTTLED = "gpu-throttled"
    NVLINK_ERRORS = "nvlink-errors"
    PCIE_REPLAYS = "pcie-replays"
    IB_LINK_FLAPPING = "ib-link-flapping"
    # gpuguard's own repairs after a verdict, opt-in per pool (docs/remediation.md;
    # policy.remediation)
    REMEDIATION_DRAINING = "remediation-draining"  # pods evicted before the repair
    REMEDIATION_WAITING = "remediation-waiting"  # the breaker: another repair is in flight
    REMEDIATION_STARTED = "remediation-started"  # the GPU reset's Job created: read next
    REMEDIATION_DONE = "remediation-done"  # carried out: the return checks and burn-in decide
    REMEDIATION_FAILED = "remediation-failed"  # the person's request says why
    REMEDIATION_HANDED_OFF = "remediation-handed-off"  # a node condition for the remediator


class ActionKind(StrEnum):
    """What an actuator is asked to do. There is deliberately no evict and no drain."""

    ISOLATE = "isolate"
    ISOLATE_GPU = "isolate-gpu"  # one GPU out, the node keeps serving (no cordon)
    UNCORDON = "uncordon"
    CLEAN_ANNOTATIONS = "clean-annotations"
    START_EVIDENCE_JOB = "start-evidence-job"
    START_BURNIN_JOB = "start-burnin-job"
    RECORD_FAULT = "record-fault"
    ANNOTATE = "annotate"


@dataclass(frozen=True, slots=True)
class Evidence:
    """One fact a decision rests on: which series or object, its value, and when."""

    source: str
    value: str
    at: datetime | None = None
    labels: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        when = f" @ {self.at.isoformat()}" if self.at else ""
        return f"{self.source} = {self.value}{when}"


@dataclass(frozen=True, slots=True)
class Action:
    """A change to make in the cluster, with why and on what evidence."""

    kind: ActionKind
    node: str
    reason: Reason
    evidence: tuple[Evidence, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Finding:
    """Something worth telling a human that changes nothing in the cluster by itself."""

    kind: str
    node: str
    reason: Reason
    gpu: str | None = None
    evidence: tuple[Evidence, ...] = ()
    detail: str = ""
