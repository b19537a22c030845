"""After an isolation: evidence, verdict, ledger line and the drafted request
(docs/design.md#evidence-and-verdict).

For a node gpuguard isolated that has no verdict yet: no evidence Job → start one; Job
running → wait; Job done → read its compact evidence summary (the verdict was computed on
the node by ``policy.verdict``), record one ledger line for this isolation (keyed by node and
isolation time, so a crash and a second pass never record it twice), and annotate the node
with the verdict and the request for the infra team, which carries the card's and the slot's
history. A failed Job or an unreadable summary still ends in a recorded fault, with the
verdict ``human-diagnosis`` and the reason in plain words: no silent gaps.

A Job that passed its ``activeDeadlineSeconds`` is ``Failed`` (reason ``DeadlineExceeded``) and
its pods deleted; a finished Job is deleted after ``ttlSecondsAfterFinished`` (Kubernetes docs,
"Jobs"). So once a Job was started for this isolation (``gpuguard.io/evidence-started``), its
absence is a result too — "evidence unavailable (Job gone)" — never a reason to start another.

Pure: the controller gathers the Job's result and the ledger, and applies the step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuguard.catalog import xid as xid_catalog
from gpuguard.errors import InputError
from gpuguard.model import (
    annotation_keys,
    decisions,
    evidence,
    faults,
    fleet,
    jobs,
    node_conditions,
    pci,
    timestamps,
)
from gpuguard.policy import admission, escalation, xid_signals

REQUEST = annotation_keys.REQUEST
DEFAULT_LOOKBACK = timedelta(hours=24)  # isolation.xid_lookback's default (model.settings)
ESCALATION = annotation_keys.ESCALATION


@dataclass(frozen=True, slots=True)
class RecoveryStep:
    """What to do for one isolated node this tick (all parts optional)."""

    node: str
    start_evidence_job: bool = False
    record: faults.LedgerEntry | None = None
    annotations: dict[str, str] | None = None
    verdict: decisions.Verdict | None = None
    escalation: escalation.Escalation | None = None
    request: str = ""
    evidence: tuple[decisions.Evidence, ...] = ()
    waiting: str = ""
    started_mark: dict[str, str] | None = None  # written once the evidence Job exists


def needs_recovery(node: fleet.Node) -> bool:
    """gpuguard isolated it (its marks are its own) and no verdict is recorded on it yet."""
    return node.isolated_by_gpuguard and node.marks.verdict is None


def decide(
    node: fleet.Node,
    job: jobs.JobResult,
    ledger: Sequence[faults.LedgerEntry],
    catalog: xid_catalog.XidCatalog,
    now: datetime,
    *,
    merge_window: timedelta = escalation.DEFAULT_MERGE_WINDOW,
    lookback: timedelta = DEFAULT_LOOKBACK,
) -> RecoveryStep:
    """``merge_window``: lines closer than this are one fault (``escalation.merge_window_for``
    the hold window: the fault's first sighting and its isolation line); ``lookback``: how far
    before the isolation its fault's first line is looked for (``fault_time``)."""
    isolated_at = node.marks.isolated_at or ""
    _isolated_at(isolated_at)  # a malformed mark (anyone may annotate): this node waits, unwritten
    started = node.marks.evidence_started == isolated_at
    mark = None if started else {annotation_keys.EVIDENCE_STARTED: isolated_at}
    if job.state is jobs.JobState.ABSENT and not started:
        return RecoveryStep(
            node.name, start_evidence_job=True, waiting="evidence Job started", started_mark=mark
        )
    if job.state is jobs.JobState.RUNNING:
        return RecoveryStep(node.name, waiting="evidence Job running", started_mark=mark)
    verdict, proof = _verdict(node, job)
    entry = _entry(node, verdict)
    if entry is not None:
        entry = dataclasses.replace(entry, at=fault_time(entry, ledger, merge_window, lookback))
    if entry is None:  # a phantom cordon: no hardware fault to record or escalate
        return RecoveryStep(
            node=node.name,
            annotations={annotation_keys.VERDICT: str(verdict)},
            verdict=verdict,
            evidence=proof,
        )
    recorded = [e for e in ledger if not _same_fault(e, entry)]
    history = escalation.history_for(
        [*recorded, entry], entry.uuid, entry.node, entry.pci, merge_window=merge_window
    )
    level = escalation.escalate(history)
    request = escalation.request_text(entry, verdict, history, level, catalog=catalog)
    request = " ".join(filter(None, (request, persistent_advice(node))))
    if job.state is not jobs.JobState.SUCCEEDED:
        request = f"{request} {proof[0].value[0].upper()}{proof[0].value[1:]}."
    return RecoveryStep(
        node=node.name,
        record=None if len(recorded) < len(ledger) else entry,
        annotations={
            annotation_keys.VERDICT: str(verdict),
            ESCALATION: str(level),
            REQUEST: request,
        },
        verdict=verdict,
        escalation=level,
        request=request,
        evidence=proof,
    )


def _verdict(
    node: fleet.Node, job: jobs.JobResult
) -> tuple[decisions.Verdict, tuple[decisions.Evidence, ...]]:
    source = f"evidence Job on {node.name}"
    if job.state is jobs.JobState.ABSENT:
        why = "evidence unavailable (the evidence Job is gone: deleted before it was read)"
        return decisions.Verdict.HUMAN_DIAGNOSIS, (decisions.Evidence(source, why),)
    if job.state is jobs.JobState.FAILED:
        why = f"evidence unavailable ({job.detail or 'the evidence Job failed, no reason given'})"
        return decisions.Verdict.HUMAN_DIAGNOSIS, (decisions.Evidence(source, why),)
    try:
        summary = evidence.EvidenceSummary.from_json(job.message or "", source=source)
    except InputError as e:
        why = f"the evidence summary could not be read: {e}"
        return decisions.Verdict.HUMAN_DIAGNOSIS, (decisions.Evidence(source, why),)
    if summary.verdict is None:
        why = "the evidence named no verdict"
        return decisions.Verdict.HUMAN_DIAGNOSIS, (decisions.Evidence(source, why),)
    facts = [f"rule {summary.rule}", *summary.evidence]
    if summary.driver_advice:
        facts.append(f"driver advice (shown, not followed): {summary.driver_advice}")
    return summary.verdict, tuple(
        decisions.Evidence(source, fact, summary.collected_at) for fact in facts
    )


def _entry(node: fleet.Node, verdict: decisions.Verdict) -> faults.LedgerEntry | None:
    """The isolation's ledger line; None for a phantom cordon, which is no hardware fault."""
    marks = node.marks
    reason = marks.reason or ""
    if reason == str(decisions.Reason.PHANTOM_UTILIZATION):
        return None
    code = int(reason.removeprefix("xid-")) if reason.removeprefix("xid-").isdecimal() else None
    kind = faults.FaultKind.XID if code is not None else faults.FaultKind.FALLEN_OFF_BUS
    if xid_signals.is_fabric_label(reason):
        kind = faults.FaultKind.FABRIC
    return faults.LedgerEntry(
        at=_isolated_at(marks.isolated_at or ""),
        node=node.name,
        xid=code,
        pci=_pci(marks.gpu_pci),
        uuid=marks.gpu_uuid,
        recorder=faults.Recorder.GPUGUARD,
        verdict=verdict,
        kind=kind,
        confirmation=faults.Confirmation.EVIDENCE
        if verdict in admission.CONFIRMING_VERDICTS
        else faults.Confirmation.OBSERVED,
    )


def fault_time(
    entry: faults.LedgerEntry,
    ledger: Sequence[faults.LedgerEntry],
    merge_window: timedelta,
    lookback: timedelta = DEFAULT_LOOKBACK,
) -> datetime:
    """When the isolated fault happened (docs/ledger.md#the-lines-time): when gpuguard first
    recorded it — the first line of the latest occurrence of the same node, card and fault
    begun by gpuguard within ``lookback`` before the isolation (its first-sighting line, at the
    fault's time) — else the isolation's own time. So the isolation's line joins its fault's
    occurrence however long the isolation came after the fault (a controller started late, a
    fault the breaker withheld): one occurrence, never two; and a retry finds the same time,
    so the line is written once. A new fall of a card isolated before has its own first line,
    written before its isolation (``policy.fault_history``), so it is never joined to the
    earlier fall's."""
    since = entry.at - lookback
    same = [e for e in ledger if since <= e.at <= entry.at and escalation.same_fault(e, entry)]
    found = escalation.occurrences(same, merge_window)
    if not found or found[-1].lines[0].recorder is not faults.Recorder.GPUGUARD:
        return entry.at
    return found[-1].at


_ADVICE = {
    node_conditions.DRIVER_ASKS_RECOVERY: (
        "The driver still asks for a repair ({detail}): do it even though its Xid 154 line may "
        "be missing from the kernel log; the recovery action persists until it is done."
    ),
    node_conditions.FATAL_SXID: (
        "A fatal NVSwitch SXid ({head}): reboot the node to reset its NVSwitches and GPUs "
        "(NVIDIA Fabric Manager user guide, NVSwitch SXid errors)."
    ),
    node_conditions.FABRIC_NOT_REGISTERED: (
        "The NVLink fabric did not register its GPUs ({detail}): check nvidia-fabricmanager "
        "(systemctl status, its log; its version must match the driver's) and restart it, or "
        "reboot the node."
    ),
}


def persistent_advice(node: fleet.Node) -> str:
    """The repair the agent's persistent-state conditions name (docs/xid-events.md#
    persistent-states): the evidence Job reads the kernel log, where a missed Xid 154 or an
    SXid's meaning is not; '' when none holds."""
    said = []
    for condition in node_conditions.persistent_faults(node.gpu_conditions):
        head, _, detail = condition.message.partition("; ")
        said.append(_ADVICE[condition.reason].format(head=head, detail=detail or head))
    return " ".join(said)


def _pci(text: str | None) -> str | None:
    return pci.try_normalize_pci(text)


def _isolated_at(text: str) -> datetime:
    at = timestamps.parse_utc(text)
    if at is None:
        raise InputError(f"annotation {annotation_keys.ISOLATED_AT}={text!r}: not a time")
    return at


def _same_fault(a: faults.LedgerEntry, b: faults.LedgerEntry) -> bool:
    """The isolation's own line (it alone carries a verdict): a fault first seen at the
    isolation's instant has a line of its own without one."""
    return (
        a.node == b.node
        and a.at == b.at
        and a.recorder == b.recorder
        and (a.verdict is None) == (b.verdict is None)
    )


_RANK = {
    escalation.Escalation.NONE: 0,
    escalation.Escalation.INSPECTION: 1,
    escalation.Escalation.REPLACEMENT: 2,
    escalation.Escalation.SLOT_CHECK: 3,
}


def escalation_update(
    node: fleet.Node,
    entry: faults.LedgerEntry,
    ledger: Sequence[faults.LedgerEntry],
    catalog: xid_catalog.XidCatalog,
    *,
    merge_window: timedelta = escalation.DEFAULT_MERGE_WINDOW,
) -> dict[str, str] | None:
    """New escalation and request marks for a node gpuguard isolated with a verdict, when a
    fault recorded later (the same card again while it waits) raises the card's escalation —
    so the request says "replace" on the third fault, not at the next isolation. None when
    nothing changes or the node is not such a node."""
    marks = node.marks
    if marks.verdict is None or marks.isolated_at is None:
        return None
    try:
        verdict = decisions.Verdict(marks.verdict)
        current = escalation.Escalation("none" if marks.escalation is None else marks.escalation)
    except ValueError:
        return None  # a mark gpuguard did not write: leave the node to people
    history = escalation.history_for(
        ledger, entry.uuid, entry.node, entry.pci, merge_window=merge_window
    )
    level = escalation.escalate(history)
    if _RANK[level] <= _RANK[current]:
        return None
    request = escalation.request_text(entry, verdict, history, level, catalog=catalog)
    return {ESCALATION: str(level), REQUEST: request}
