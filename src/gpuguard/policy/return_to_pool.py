"""Decide whether a node gpuguard isolated may go back to the pool (docs/design.md#return-to-pool).

The return conditions (``policy.return_checks``) are checked in order and all reported.
All PASS starts a burn-in; its pass returns the node, its failure keeps it isolated with the
failed check annotated. Any FAIL holds the node; any UNKNOWN without a FAIL waits: missing data
never returns a node.

A pure function: no I/O, no clock (``now`` is an argument).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from gpuguard.model import annotation_keys as keys
from gpuguard.model import decisions, faults, fleet, pci
from gpuguard.model import return_to_pool as model
from gpuguard.model import settings as settings_model
from gpuguard.model.node_marks import Isolation
from gpuguard.policy import return_checks

Status = decisions.CheckStatus
Step = model.ReturnStep
Reason = decisions.Reason
_Context = return_checks.Context

OWN_KEYS = keys.PER_ISOLATION
"""The annotations gpuguard writes at isolation and while validating; removed on return."""

CONSUMED_HUMAN_KEYS = (keys.RESET_DONE, keys.INSPECTED)
"""A human's marks that speak for one isolation only; removed with it on return.
``gpuguard.io/hold`` is never removed by gpuguard: only the human who set it lifts it."""


def decide(
    node: fleet.Node,
    facts: model.ReturnFacts,
    settings: settings_model.GuardSettings,
    now: datetime,
) -> model.ReturnDecision:
    """The return step for one node, with the whole checklist (always all 11, in order)."""
    context = return_checks.context_of(node, facts, settings, now)
    return _conclude(context, return_checks.run(context))


def _conclude(c: _Context, checks: tuple[model.ReturnCheck, ...]) -> model.ReturnDecision:
    node = c.node
    if node.marks.isolation is Isolation.NONE:
        reason = Reason.HUMAN_CORDON if node.unschedulable else Reason.NOT_ISOLATED
        return _decision(c, checks, Step.NONE, reason, checks[0].summary)
    if node.marks.isolation is Isolation.FOREIGN:
        detail = (
            f"{keys.ISOLATED_AT} was written by {node.marks.foreign_writer}, not by gpuguard: "
            "not gpuguard's isolation, never returned by gpuguard"
        )
        return _decision(c, checks, Step.NONE, Reason.MARKS_NOT_GPUGUARDS, detail)
    if not node.unschedulable:
        detail = "burn-in skipped: uncordoned by a human; gpuguard's annotations removed"
        return _decision(
            c, checks, Step.CLEAN_ANNOTATIONS, Reason.HUMAN_UNCORDONED, detail,
            act=decisions.ActionKind.CLEAN_ANNOTATIONS, evidence=checks[0].evidence,
            remove=_removable(node, OWN_KEYS),
        )  # fmt: skip
    if failed := _first(checks, Status.FAIL):
        detail = f"held: {failed.name}: {failed.summary}"
        return _decision(c, checks, Step.HOLD, Reason.RETURN_BLOCKED, detail, blocking=failed)
    if unknown := _first(checks, Status.UNKNOWN):
        detail = f"waiting: {unknown.name}: {unknown.summary}"
        return _decision(c, checks, Step.WAIT, Reason.RETURN_DATA_MISSING, detail, blocking=unknown)
    return _after_checks(c, checks)


def _after_checks(c: _Context, checks: tuple[model.ReturnCheck, ...]) -> model.ReturnDecision:
    """Every condition passed: the burn-in of this repair decides — once. A failure recorded
    on the node (``gpuguard.io/burnin-failed``) for this boot, reset and inspection stands
    whatever became of its Job (deleted by its TTL, its pods by PodGC)."""
    mode, result = _mode(c), c.facts.burnin
    if c.node.marks.burnin_failed == burnin_key(c.node, mode):
        failed = c.node.marks.return_failed or "burn-in failed"
        detail = (
            f"burn-in ({mode}) failed on this boot: {failed}; stays isolated until a new boot, "
            f"{keys.RESET_DONE} or {keys.INSPECTED}"
        )
        return _decision(c, checks, Step.STAY_ISOLATED, Reason.BURN_IN_FAILED, detail, mode=mode)
    if result is None or not _tests_this_repair(c, result, mode):
        detail = f"all {len(checks)} return conditions pass: start the burn-in ({mode})"
        return _decision(
            c, checks, Step.START_BURN_IN, Reason.RETURN_CONDITIONS_MET, detail,
            act=decisions.ActionKind.START_BURNIN_JOB, evidence=_checklist_evidence(c, checks),
            mode=mode,
        )  # fmt: skip
    ran = _burnin_evidence(c, result)
    if result.outcome is model.BurninOutcome.RUNNING:
        detail = f"burn-in ({result.mode}) running since {result.started_at.isoformat()}"
        return _decision(c, checks, Step.BURN_IN_RUNNING, Reason.BURN_IN_RUNNING, detail, mode=mode)
    if result.outcome is model.BurninOutcome.PASSED:
        detail = f"burn-in ({result.mode}) passed: returned to service after {c.fault.label}"
        return _decision(
            c, checks, Step.UNCORDON, Reason.BURN_IN_PASSED, detail,
            act=decisions.ActionKind.UNCORDON, evidence=(*_checklist_evidence(c, checks), ran),
            remove=_removable(c.node, OWN_KEYS + CONSUMED_HUMAN_KEYS), mode=result.mode,
        )  # fmt: skip
    failed = result.failed_check or "burn-in failed (no check named)"
    detail = f"burn-in ({result.mode}) failed: {failed}; stays isolated"
    return _decision(
        c, checks, Step.STAY_ISOLATED, Reason.BURN_IN_FAILED, detail,
        act=decisions.ActionKind.ANNOTATE, evidence=(ran,), mode=mode,
        annotations={keys.RETURN_FAILED: failed, keys.BURNIN_FAILED: burnin_key(c.node, mode)},
        record=_burnin_line(c, result),
    )  # fmt: skip


def burnin_key(node: fleet.Node, mode: model.BurninMode) -> str:
    """The key of the node's burn-in now: its isolation, boot, a human's reset and inspection
    marks, and the mode."""
    marks = node.marks
    return model.burnin_key(
        marks.isolated_at or "", node.boot_id, str(mode), marks.reset_done, marks.inspected
    )  # fmt: skip


def _burnin_line(c: _Context, result: model.BurninResult) -> faults.LedgerEntry:
    """The ledger line of a failed burn-in: the isolated card's, at the burn-in's start."""
    return faults.LedgerEntry(
        at=result.started_at,
        node=c.node.name,
        xid=None,
        pci=pci.try_normalize_pci(c.node.marks.gpu_pci),
        uuid=c.node.marks.gpu_uuid,
        recorder=faults.Recorder.GPUGUARD,
        kind=faults.FaultKind.BURNIN_FAILED,
    )


def _tests_this_repair(c: _Context, result: model.BurninResult, mode: model.BurninMode) -> bool:
    """A result counts for the current boot, after the isolation and any reset, in the mode."""
    if c.isolated_at is None:
        return False
    reset = return_checks.parse_stamp(c.node.marks.reset_done)
    after = max(c.isolated_at, reset) if reset is not None else c.isolated_at
    deep_enough = mode is model.BurninMode.MATMUL or result.mode is mode
    return result.boot_id == c.node.boot_id and result.started_at > after and deep_enough


def _decision(
    c: _Context,
    checks: tuple[model.ReturnCheck, ...],
    step: model.ReturnStep,
    reason: Reason,
    detail: str,
    *,
    act: decisions.ActionKind | None = None,
    evidence: tuple[decisions.Evidence, ...] = (),
    annotations: dict[str, str] | None = None,
    remove: tuple[str, ...] = (),
    blocking: model.ReturnCheck | None = None,
    mode: model.BurninMode | None = None,
    record: faults.LedgerEntry | None = None,
) -> model.ReturnDecision:
    """The decision; with ``act``, the one write that carries it out (same reason, detail)."""
    action = None
    if act is not None:
        action = decisions.Action(
            kind=act,
            node=c.node.name,
            reason=reason,
            evidence=evidence,
            annotations=annotations or {},
            detail=detail,
        )
    return model.ReturnDecision(
        node=c.node.name,
        step=step,
        reason=reason,
        checks=checks,
        detail=detail,
        action=action,
        remove_annotations=remove,
        blocking=blocking,
        burnin_mode=mode,
        record=record,
    )


def _checklist_evidence(
    c: _Context, checks: tuple[model.ReturnCheck, ...]
) -> tuple[decisions.Evidence, ...]:
    passed = sum(1 for check in checks if check.status is Status.PASS)
    names = ", ".join(str(check.name) for check in checks)
    return (c.seen("return checklist", f"{passed}/{len(checks)} PASS ({names})"),)


def _burnin_evidence(c: _Context, result: model.BurninResult) -> decisions.Evidence:
    text = f"{result.outcome} ({result.mode}, boot {result.boot_id})"
    if result.failed_check:
        text += f": {result.failed_check}"
    if result.detail:
        text += f"; {result.detail}"
    return decisions.Evidence(source=f"burn-in of {c.node.name}", value=text, at=result.started_at)


def _mode(c: _Context) -> model.BurninMode:
    if c.fault.verdict is None or c.fault.xid in c.settings.memory_test_xids:
        return model.BurninMode.MATMUL_AND_MEMTEST
    return model.BurninMode.MATMUL


def _first(checks: Iterable[model.ReturnCheck], status: Status) -> model.ReturnCheck | None:
    return next((check for check in checks if check.status is status), None)


def _removable(node: fleet.Node, candidates: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(key for key in candidates if key in node.annotations)
