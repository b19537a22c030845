"""Inputs and outputs of the return-to-pool decision (docs/design.md#return-to-pool).

The controller gathers ``ReturnFacts`` for one isolated node (pods, Xid signals, the ledger's
count for the card, agent reports, the burn-in Job's result); ``policy.return_to_pool.decide`` turns
them into a ``ReturnDecision`` whose checklist lists every condition, in order, with status
and evidence, so ``gpuguard explain`` can show a human the whole picture, not the first miss.

Every fact uses one convention: ``None`` means "could not be read" (the check is UNKNOWN, and
missing data never returns a node); an empty collection means "read, nothing reported".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from gpuguard.model import decisions, faults, fleet


class ReturnCondition(StrEnum):
    """The conditions a node must meet before its burn-in, in the order they are checked."""

    STILL_CORDONED = "still-cordoned"
    REBOOTED_OR_RESET = "rebooted-or-reset"
    GPUS_BACK = "gpus-back"
    NO_HARDWARE_XID = "no-hardware-xid"
    NO_GPU_PODS = "no-gpu-pods"
    NO_HOLD = "no-hold"
    CARD_HISTORY = "card-history"
    ROW_REMAP_PENDING = "row-remap-pending"
    HOST_CONFORMANCE = "host-conformance"
    SERVICE_NETWORK = "service-network"
    PCIE_LINK = "pcie-link"


@dataclass(frozen=True, slots=True)
class ReturnCheck:
    """One condition's result: PASS / FAIL / UNKNOWN, a one-line summary and the evidence."""

    name: ReturnCondition
    status: decisions.CheckStatus
    summary: str
    evidence: tuple[decisions.Evidence, ...] = ()


class ReturnStep(StrEnum):
    """What the return-to-pool policy decided for a node this tick."""

    NONE = "none"  # not gpuguard's node (never isolated, or a human's cordon): never touch
    CLEAN_ANNOTATIONS = "clean-annotations"  # a human uncordoned first
    HOLD = "hold"  # a condition failed: stay isolated, a human or time must act
    WAIT = "wait"  # a condition could not be read: fail closed, ask again next tick
    START_BURN_IN = "start-burn-in"
    BURN_IN_RUNNING = "burn-in-running"
    UNCORDON = "uncordon"  # burn-in passed: uncordon + remove annotations, Event, notice
    STAY_ISOLATED = "stay-isolated"  # burn-in failed: annotate the failed check, alert


class BurninMode(StrEnum):
    """The burn-in's depth: the seed's matmul, plus a memory test after memory-class faults."""

    MATMUL = "matmul"
    MATMUL_AND_MEMTEST = "matmul+memtest"


class BurninOutcome(StrEnum):
    RUNNING = "running"
    PASSED = "passed"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class BurninResult:
    """The latest burn-in Job of a node, as the burn-in runner reports it.

    ``boot_id`` is the node's boot ID when the Job ran: a result counts only for the boot (and,
    after a reset, the reset) it tested. ``failed_check`` names what failed, e.g.
    ``throughput-ratio 0.71 < 0.80`` or ``gpu-count 7/8``.
    """

    outcome: BurninOutcome
    mode: BurninMode
    boot_id: str
    started_at: datetime
    failed_check: str = ""
    detail: str = ""


@dataclass(frozen=True, slots=True)
class PcieLink:
    """One GPU's PCIe link as last reported, against its maximum.

    GPUs lower the link generation when idle to save power, so ``generation`` is compared
    with ``max_generation`` only when ``under_load`` is True; the width does not idle down.
    """

    gpu: str
    width: int
    max_width: int
    generation: int
    max_generation: int
    under_load: bool = False


@dataclass(frozen=True, slots=True)
class ReturnFacts:
    """What the controller read about one node for the return decision.

    ``hardware_xids_since_boot``: one Evidence per hardware Xid signal on the node since its
    boot (for a reset-class fault: since the reset), from ``policy.xid_signals`` or the agent's
    counters. ``card_faults``: the ledger's fault count of the card named in
    ``gpuguard.io/gpu-uuid``, this fault included. ``row_remap_pending``: per GPU, the value of
    ``DCGM_FI_DEV_ROW_REMAP_PENDING``. ``conformance``: the agent's check statuses by check name
    (empty: no agent on the node). ``burnin``: the node's latest burn-in Job, if any.
    """

    pods: tuple[fleet.Pod, ...] | None
    hardware_xids_since_boot: tuple[decisions.Evidence, ...] | None
    card_faults: int | None
    row_remap_pending: Mapping[str, float] | None
    conformance: Mapping[str, decisions.CheckStatus] | None
    pcie_links: tuple[PcieLink, ...] | None
    burnin: BurninResult | None = None


@dataclass(frozen=True, slots=True)
class ReturnDecision:
    """The return decision for one node: the step, why, the full checklist, and the write.

    ``action`` is what the actuators do (None when nothing is written this tick);
    ``remove_annotations`` are the keys the same patch deletes (merge patch: ``null``);
    ``blocking`` is the first FAIL (for ``hold``) or UNKNOWN (for ``wait``).
    """

    node: str
    step: ReturnStep
    reason: decisions.Reason
    checks: tuple[ReturnCheck, ...]
    detail: str
    action: decisions.Action | None = None
    remove_annotations: tuple[str, ...] = ()
    blocking: ReturnCheck | None = None
    burnin_mode: BurninMode | None = None
    record: faults.LedgerEntry | None = None  # a failed burn-in's ledger line, written once


def burnin_key(
    isolated_at: str,
    boot_id: str,
    mode: str,
    reset_done: str | None = None,
    inspected: str | None = None,
) -> str:
    """What one burn-in tests: this isolation, on this boot, after this reset and inspection (a
    human's marks, if any), in this mode. A failed burn-in is never run again under the same
    key: only a new boot, a reset or an inspection mark makes a new one."""
    key = f"{isolated_at}/{boot_id}/{reset_done or ''}/{mode}"
    return f"{key}/{inspected}" if inspected else key
