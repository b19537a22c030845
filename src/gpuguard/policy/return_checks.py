"""The conditions a node must meet to go back to the pool (docs/design.md#return-to-pool).

Checked in order and all reported, each PASS / FAIL / UNKNOWN with evidence: still cordoned by
gpuguard; rebooted since isolation (reset-class faults: a human's ``gpuguard.io/reset-done``
after the isolation, or a reboot); Ready with the GPU count recorded at isolation; no hardware
Xid since boot; no running pod holding GPUs; no human hold; the card's ledger history; ECC
row-remap pending; host conformance; kube-proxy and CNI pods Ready; PCIe link width (and, under
load, generation) at max. ``policy.return_to_pool`` turns the checklist into the return step.

The seed's guard checked only the first five (its gaps, "남은 과제"): on 9/22 it returned
gpu-node-b although the infra team had asked for the card to be inspected (it read only its
own annotation; the card had its 2nd Xid 79 in 11 days), and a reset-class fault could pass on
an operand restart that merely emptied the Xid gauge, without any reset.

Reports that a node legitimately lacks pass as "not reported" unless the settings require
them: no agent (conformance), cards without row remapping (pre-Ampere, GeForce), no PCIe link
metrics. A fact that could not be read (``None`` in ``ReturnFacts``) is UNKNOWN.

Pure functions: no I/O, no clock (``now`` is an argument).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from gpuguard.catalog import xid as xid_catalog
from gpuguard.errors import InputError
from gpuguard.model import annotation_keys as keys
from gpuguard.model import decisions, fleet, remediation, timestamps
from gpuguard.model import metric_names as names
from gpuguard.model import return_to_pool as model
from gpuguard.model import settings as settings_model
from gpuguard.policy import xid_signals

Status = decisions.CheckStatus
Condition = model.ReturnCondition


@dataclass(frozen=True, slots=True)
class Fault:
    """The fault the node was isolated for, from ``gpuguard.io/reason`` and ``/verdict``."""

    label: str
    xid: int | None
    verdict: decisions.Verdict | None


@dataclass(frozen=True, slots=True)
class Context:
    node: fleet.Node
    facts: model.ReturnFacts
    settings: settings_model.ReturnSettings
    own_namespace: str
    fault: Fault
    isolated_at: datetime | None
    now: datetime

    def seen(self, source: str, value: str) -> decisions.Evidence:
        return decisions.Evidence(source=source, value=value, at=self.now)


def context_of(
    node: fleet.Node,
    facts: model.ReturnFacts,
    settings: settings_model.GuardSettings,
    now: datetime,
) -> Context:
    """What every condition reads: the node, its facts, the settings and the isolated fault."""
    return Context(
        node=node,
        facts=facts,
        settings=settings.return_to_pool,
        own_namespace=settings.controller.namespace,
        fault=_fault_of(node),
        isolated_at=parse_stamp(node.marks.isolated_at),
        now=now,
    )


def run(c: Context) -> tuple[model.ReturnCheck, ...]:
    """The whole checklist: always all 11 conditions, in order."""
    return tuple(check(c) for check in CHECKS)


def parse_stamp(text: str | None) -> datetime | None:
    """An annotation's ISO 8601 time with a zone (``2026-09-22T07:25:00Z``); else None."""
    return timestamps.parse_utc(text)


# --- the conditions, in order ---------------------------------------------------------------


def _still_cordoned(c: Context) -> model.ReturnCheck:
    raw = c.node.marks.isolated_at
    result = _result(
        Condition.STILL_CORDONED,
        c.seen(f"node/{c.node.name} spec.unschedulable", str(c.node.unschedulable).lower()),
        c.seen(keys.ISOLATED_AT, raw if raw is not None else "(absent)"),
    )
    if raw is None:
        who = "cordoned by a human" if c.node.unschedulable else "not isolated"
        return result(Status.FAIL, f"{who}: not gpuguard's to return")
    if not c.node.unschedulable:
        return result(Status.FAIL, "uncordoned by a human before validation: burn-in skipped")
    if c.isolated_at is None:
        return result(Status.UNKNOWN, f"{keys.ISOLATED_AT} {raw!r} is not a time with a zone")
    return result(Status.PASS, f"cordoned by gpuguard since {raw} for {c.fault.label}")


def _rebooted_or_reset(c: Context) -> model.ReturnCheck:
    recorded, current = c.node.marks.boot_id, c.node.boot_id
    boot = c.seen(f"{keys.BOOT_ID} -> node/{c.node.name} bootID", f"{recorded} -> {current}")
    result = _result(Condition.REBOOTED_OR_RESET, boot)
    if recorded and current and recorded != current:
        return result(Status.PASS, "rebooted since isolation (boot ID changed)")
    if c.fault.verdict is decisions.Verdict.GPU_RESET:
        return _reset_done(c, boot)
    if not recorded or not current:
        return result(Status.UNKNOWN, "boot ID unknown (at isolation or now)")
    return result(Status.FAIL, f"not rebooted since isolation for {c.fault.label}")


def _reset_done(c: Context, boot: decisions.Evidence) -> model.ReturnCheck:
    """Reset-class faults recover without a reboot, but an operand restart is no proof."""
    raw = c.node.marks.reset_done
    mark = c.seen(keys.RESET_DONE, raw if raw is not None else "(absent)")
    result = _result(Condition.REBOOTED_OR_RESET, boot, mark)
    stamp = parse_stamp(raw)
    if raw is None and (done := _gpuguards_reset(c)) is not None:
        evidence = c.seen(keys.REMEDIATION, done.render())
        return _result(Condition.REBOOTED_OR_RESET, boot, evidence)(
            Status.PASS, f"GPU reset by gpuguard at {timestamps.format_utc(done.at)}: "
            f"{done.detail}")
    if raw is None:
        return result(
            Status.FAIL,
            f"reset-class fault {c.fault.label}: no reboot and no {keys.RESET_DONE}; a "
            "restarted dcgm-exporter or device plugin is no proof of a GPU reset",
        )
    if stamp is None or stamp > c.now or c.isolated_at is None:
        return result(Status.UNKNOWN, f"{keys.RESET_DONE} {raw!r} is not a past time with a zone")
    if stamp <= c.isolated_at:
        return result(
            Status.FAIL,
            f"{keys.RESET_DONE} {raw} is not after the isolation "
            f"({c.node.marks.isolated_at}): the reset of an earlier fault",
        )
    return result(Status.PASS, f"GPU reset confirmed by a human at {raw}")


def _gpuguards_reset(c: Context) -> remediation.Mark | None:
    """gpuguard's own reset of this isolation's card (docs/remediation.md#gpu-reset): its Job
    ended well after the isolation; a malformed mark is no proof."""
    try:
        mark = c.node.marks.remediation
    except InputError:
        return None
    if (mark is None or mark.action is not remediation.Action.GPU_RESET
            or mark.result is not remediation.Result.DONE
            or mark.isolated_at != c.node.marks.isolated_at
            or c.isolated_at is None or mark.at <= c.isolated_at or mark.at > c.now):
        return None
    return mark


def _gpus_back(c: Context) -> model.ReturnCheck:
    node, raw = c.node, c.node.marks.gpu_capacity
    recorded = _int_or_none(raw)
    ready = node.conditions.get("Ready", "(absent)")
    result = _result(
        Condition.GPUS_BACK,
        c.seen(f"node/{node.name} condition Ready", ready),
        c.seen(
            f"node/{node.name} nvidia.com/gpu capacity/allocatable",
            f"{node.gpu_capacity}/{node.gpu_allocatable}",
        ),
        c.seen(keys.GPU_CAPACITY, raw if raw is not None else "(absent)"),
    )
    failures = [
        *(["node not Ready"] if ready == "False" else []),
        *(
            [f"capacity {node.gpu_capacity} != {recorded} at isolation"]
            if recorded is not None and node.gpu_capacity != recorded
            else []
        ),
        *(
            [f"allocatable {node.gpu_allocatable} != capacity {node.gpu_capacity}"]
            if node.gpu_allocatable != node.gpu_capacity
            else []
        ),
    ]
    unknowns = [
        *([f"Ready is {ready}"] if ready not in ("True", "False") else []),
        *([f"{keys.GPU_CAPACITY} {raw!r} is not a count"] if recorded is None else []),
    ]
    if failures or unknowns:
        return result(Status.FAIL if failures else Status.UNKNOWN, "; ".join(failures + unknowns))
    return result(
        Status.PASS, f"Ready, {node.gpu_allocatable}/{node.gpu_capacity} GPUs as at isolation"
    )


def _no_hardware_xid(c: Context) -> model.ReturnCheck:
    signals = c.facts.hardware_xids_since_boot
    if signals is None:
        return _result(Condition.NO_HARDWARE_XID)(Status.UNKNOWN, "Xid signals unreadable")
    result = _result(Condition.NO_HARDWARE_XID, *signals)
    if signals:
        return result(Status.FAIL, f"{len(signals)} hardware Xid signal(s) since boot")
    return result(Status.PASS, "no hardware Xid since boot")


def _no_gpu_pods(c: Context) -> model.ReturnCheck:
    if c.facts.pods is None:
        return _result(Condition.NO_GPU_PODS)(Status.UNKNOWN, "pods on the node unreadable")
    holders = [
        p
        for p in c.facts.pods
        if p.phase is fleet.PodPhase.RUNNING
        and p.gpu_request > 0
        and p.namespace != c.own_namespace
    ]
    result = _result(
        Condition.NO_GPU_PODS,
        *(
            c.seen(f"pod/{p.namespace}/{p.name}", f"Running, {p.gpu_request} GPU(s)")
            for p in holders
        ),
    )
    if holders:
        return result(Status.FAIL, f"{len(holders)} running pod(s) hold GPUs")
    return result(
        Status.PASS, f"no running pod holds GPUs (besides gpuguard's in {c.own_namespace})"
    )


def _no_hold(c: Context) -> model.ReturnCheck:
    text = c.node.marks.hold
    if text is None:
        return _result(Condition.NO_HOLD)(Status.PASS, f"no {keys.HOLD}")
    result = _result(Condition.NO_HOLD, c.seen(keys.HOLD, text))
    return result(Status.FAIL, f"held by a human: {text.strip() or '(no reason given)'}")


def _card_history(c: Context) -> model.ReturnCheck:
    if xid_signals.is_fabric_label(c.fault.label):  # docs/xid-events.md#persistent-states
        return _result(Condition.CARD_HISTORY)(
            Status.PASS, f"{c.fault.label}: a node-wide fabric fault names no card to count")
    card = c.node.marks.gpu_uuid or "(card unknown)"
    faults, limit = c.facts.card_faults, c.settings.max_card_faults
    if faults is None:
        return _result(Condition.CARD_HISTORY)(Status.UNKNOWN, f"ledger count of {card} unreadable")
    count = c.seen(f"ledger faults of {card}", str(faults))
    if faults < limit:
        return _result(Condition.CARD_HISTORY, count)(
            Status.PASS, f"{faults} fault(s) of {card} in the ledger (held at {limit})"
        )
    return _inspected(c, f"{card} has {faults} faults in the ledger (held at {limit})", count)


def _inspected(c: Context, history: str, count: decisions.Evidence) -> model.ReturnCheck:
    """A card with a history returns only after a human's inspection of this fault."""
    raw = c.node.marks.inspected
    if raw is None:
        return _result(Condition.CARD_HISTORY, count)(
            Status.FAIL, f"{history}: needs a human's inspection ({keys.INSPECTED}=<time>)"
        )
    result = _result(Condition.CARD_HISTORY, count, c.seen(keys.INSPECTED, raw))
    stamp = parse_stamp(raw)
    if stamp is None or stamp > c.now or c.isolated_at is None:
        return result(Status.UNKNOWN, f"{keys.INSPECTED} {raw!r} is not a past time with a zone")
    if stamp <= c.isolated_at:
        return result(Status.FAIL, f"{history}: {keys.INSPECTED} {raw} predates this fault")
    return result(Status.PASS, f"{history}; inspected by a human at {raw}")


def _row_remap_pending(c: Context) -> model.ReturnCheck:
    pending = c.facts.row_remap_pending
    if pending is None:
        return _result(Condition.ROW_REMAP_PENDING)(Status.UNKNOWN, "row-remap pending unreadable")
    result = _result(
        Condition.ROW_REMAP_PENDING,
        *(
            c.seen(f"{names.DCGM_ROW_REMAP_PENDING} gpu={g}", f"{v:g}")
            for g, v in sorted(pending.items())
        ),
    )
    if not pending:
        if c.settings.require_row_remap:
            return result(Status.UNKNOWN, "row-remap pending not reported (required)")
        return result(Status.PASS, "not reported: cards without row remapping do not export it")
    waiting = [gpu for gpu, value in sorted(pending.items()) if value > 0]
    if waiting:
        return result(Status.FAIL, f"row remap pending on GPU {', '.join(waiting)}: needs a reset")
    return result(Status.PASS, f"no row remap pending on {len(pending)} GPU(s)")


def _host_conformance(c: Context) -> model.ReturnCheck:
    reports = c.facts.conformance
    if reports is None:
        return _result(Condition.HOST_CONFORMANCE)(Status.UNKNOWN, "agent's checks unreadable")
    result = _result(
        Condition.HOST_CONFORMANCE,
        *(c.seen(f"check/{name}", str(status)) for name, status in sorted(reports.items())),
    )
    if not reports:
        if c.settings.require_conformance:
            return result(Status.UNKNOWN, "no agent report on this node (required)")
        return result(Status.PASS, "no agent on this node: not required")
    for worst in (Status.FAIL, Status.UNKNOWN):
        named = sorted(name for name, status in reports.items() if status is worst)
        if named:
            return result(worst, f"{worst}: {', '.join(named)}")
    warned = sorted(name for name, status in reports.items() if status is Status.WARN)
    note = f" (WARN: {', '.join(warned)})" if warned else ""
    return result(Status.PASS, f"{len(reports)} checks pass{note}")


def _service_network(c: Context) -> model.ReturnCheck:
    if c.facts.pods is None:
        return _result(Condition.SERVICE_NETWORK)(Status.UNKNOWN, "pods on the node unreadable")
    found = [
        p
        for p in c.facts.pods
        if p.name.startswith(c.settings.service_network_pods)
        and p.phase not in (fleet.PodPhase.SUCCEEDED, fleet.PodPhase.FAILED)
    ]
    result = _result(
        Condition.SERVICE_NETWORK,
        *(c.seen(f"pod/{p.namespace}/{p.name}", f"{p.phase}, ready={p.ready}") for p in found),
    )
    if not found:
        why = "no kube-proxy or CNI pod on the node (return_to_pool.service_network_pods)"
        return result(Status.UNKNOWN, why)
    down = [p.name for p in found if not (p.phase is fleet.PodPhase.RUNNING and p.ready)]
    if down:
        return result(Status.FAIL, f"not Ready: {', '.join(down)}")
    return result(Status.PASS, f"Ready: {', '.join(p.name for p in found)}")


def _pcie_link(c: Context) -> model.ReturnCheck:
    links = c.facts.pcie_links
    if links is None:
        return _result(Condition.PCIE_LINK)(Status.UNKNOWN, "PCIe link state unreadable")
    result = _result(
        Condition.PCIE_LINK, *(c.seen(f"PCIe link gpu={x.gpu}", _link(x)) for x in links)
    )
    if not links:
        return result(Status.PASS, "not reported")
    degraded = [link.gpu for link in links if _degraded(link)]
    if degraded:
        return result(Status.FAIL, f"PCIe link below max on GPU {', '.join(degraded)}")
    return result(
        Status.PASS,
        f"{len(links)} link(s) at max width (generation compared under load only: idle GPUs "
        "lower it)",
    )


CHECKS: tuple[Callable[[Context], model.ReturnCheck], ...] = (
    _still_cordoned,
    _rebooted_or_reset,
    _gpus_back,
    _no_hardware_xid,
    _no_gpu_pods,
    _no_hold,
    _card_history,
    _row_remap_pending,
    _host_conformance,
    _service_network,
    _pcie_link,
)
"""One function per ``ReturnCondition``, in its order."""

# --- small readers --------------------------------------------------------------------------


def _fault_of(node: fleet.Node) -> Fault:
    """``xid-94`` or ``fallen-off-bus``; a verdict annotation (the evidence Job's) outranks
    the code's default verdict. An unreadable reason leaves the verdict unknown (None)."""
    label = (node.marks.reason or "").strip()
    xid = _int_or_none(label.removeprefix("xid-")) if label.startswith("xid-") else None
    verdict = _verdict_or_none(node.marks.verdict)
    if verdict is None and xid is not None:
        verdict = xid_catalog.default_verdict(xid)
    if verdict is None and label == "fallen-off-bus":
        verdict = decisions.Verdict.POWER_CYCLE
    return Fault(label=label or "(no reason)", xid=xid, verdict=verdict)


def _verdict_or_none(text: str | None) -> decisions.Verdict | None:
    try:
        return decisions.Verdict(text) if text is not None else None
    except ValueError:
        return None


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _degraded(link: model.PcieLink) -> bool:
    narrow = link.width < link.max_width
    slow = link.under_load and link.generation < link.max_generation
    return narrow or slow


def _link(link: model.PcieLink) -> str:
    load = "under load" if link.under_load else "idle"
    return f"x{link.width}/x{link.max_width} gen{link.generation}/{link.max_generation} {load}"


def _result(
    name: Condition, *evidence: decisions.Evidence
) -> Callable[[Status, str], model.ReturnCheck]:
    """The condition's verdict-maker: the evidence is gathered once, the status varies."""

    def result(status: Status, summary: str) -> model.ReturnCheck:
        return model.ReturnCheck(name=name, status=status, summary=summary, evidence=evidence)

    return result
