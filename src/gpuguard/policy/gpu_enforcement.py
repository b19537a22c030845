"""Keep isolated GPUs out, and let them back only through the return checks
(docs/gpu-isolation.md).

Every mechanism that keeps a GPU out can be lost: compute mode resets to Default at every boot
(NVML, ``nvmlDeviceSetComputeMode``), and a device plugin that restarts without its exclusion
advertises every GPU again (k8s-device-plugin: a restart rebuilds the device list as Healthy).
So each tick, for every node serving with isolated GPUs, ``plan`` says what to do:

- **apply** when an isolated GPU was never applied on the node's current boot (a new isolation,
  or the node rebooted: the boot ID changed), or when the node advertises more GPUs than it
  should (a device-plugin restart re-advertised one) — the isolation Job runs again;
- **return** the GPUs a person asked back (``gpuguard.io/gpu-return``) once their card history
  allows it (a card with a replacement asked is held unless the request says it was replaced:
  ``replaced:GPU-...``): the undo Job puts compute mode back to Default and reads the card's
  row-remap state; then
- **burnin** that GPU alone (still not advertised: its node labels keep it out of the device
  plugin) — it returns only when the burn-in passes, else it is held again;
- **held** otherwise: verified on this boot, the node advertises what it should.

``after_apply`` and ``after_return`` turn the isolation Job's report into the node's new marks.
A report that shows a GPU not held (compute mode not PROHIBITED, not on the exclusion list)
fails the application: the caller isolates the node instead. Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum

from gpuguard.catalog import xid as xid_catalog
from gpuguard.model import annotation_keys, decisions, faults, fleet, gpu_isolation
from gpuguard.policy import escalation, gpu_route

Reason = decisions.Reason
REPLACED = "replaced:"


class Step(StrEnum):
    APPLY = "apply"
    RETURN = "return"
    BURNIN = "burnin"  # a returning GPU's own burn-in
    RECORD = "record"  # the device plugin restarted with the exclusion: remember that pod
    HELD = "held"
    WAIT = "wait"


@dataclass(frozen=True, slots=True)
class Plan:
    node: str
    step: Step
    uuids: tuple[str, ...]
    key: str  # what the Job does: action, GPUs, boot, after which application
    detail: str
    refused: Mapping[str, str] = field(default_factory=dict)  # return asked, not allowed: why
    plugin: str = ""  # the node's device-plugin pod now (``gpu_isolation.plugin_stamp``)


def plan(
    node: fleet.Node, ledger: Sequence[faults.LedgerEntry] | None, pods: Iterable[fleet.Pod]
) -> Plan | None:
    """This tick's step for a node serving with isolated GPUs (None: it has none); ``pods``
    are the node's pods (its device-plugin pod's restarts say when to re-apply)."""
    entries = node.marks.gpus
    if not entries:
        return None
    if not node.ready:
        return Plan(node.name, Step.WAIT, (), "", "node not Ready: applied when it is back")
    pods = tuple(pods)
    plugin = gpu_isolation.plugin_stamp(pods)
    burning = [e for e in entries if e.returning]
    if burning:
        card = burning[0]
        key = f"burnin/{card.uuid}/{node.boot_id}/{_stamp([card])}"
        detail = f"return asked: burn-in of GPU {card.index} ({card.uuid}) alone"
        return Plan(node.name, Step.BURNIN, (card.uuid,), key, detail, {}, plugin)
    returning, refused = _returns(node, entries, ledger)
    if returning:
        uuids = tuple(sorted(returning))
        stamp = _stamp([e for e in entries if e.uuid in returning])
        key = f"undo/{','.join(uuids)}/{node.boot_id}/{stamp}"
        return Plan(node.name, Step.RETURN, uuids, key, "return asked", refused, plugin)
    uuids = tuple(e.uuid for e in entries)
    why = _stale(node, entries, plugin)
    if why:
        key = f"apply/{','.join(uuids)}/{node.boot_id}/{_stamp(entries)}"
        return Plan(node.name, Step.APPLY, uuids, key, why, refused, plugin)
    expected = gpu_isolation.expected_capacity(entries)
    if _operator(node) and gpu_isolation.operator_plugin_running(pods):
        return Plan(node.name, Step.WAIT, uuids, "", "waiting for the GPU Operator to remove its "
                    "device plugin (it sees every GPU) from the node", refused, plugin)
    detail = (
        f"verified on boot {node.boot_id[:8]}: GPUs {node.gpu_allocatable}/{node.gpu_capacity} "
        f"advertised (expected {expected}), {len(entries)} isolated"
    )
    step = Step.RECORD if plugin and any(not e.plugin for e in entries) else Step.HELD
    return Plan(node.name, step, uuids, "", detail, refused, plugin)


def _operator(node: fleet.Node) -> bool:
    """A GPU Operator node: its operand label moves the operator's plugin aside
    (docs/gpu-isolation.md#gpu-operator)."""
    return gpu_route.route(node).route is gpu_route.Route.GPU_OPERATOR


def _stamp(entries: Iterable[gpu_isolation.IsolatedGpu]) -> str:
    """The last application among ``entries``: a Job key per application, so a step that ran
    before a re-application runs again after it."""
    last = max((e.applied_at for e in entries if e.applied_at), default=None)
    return last.isoformat() if last else "never"


def _stale(
    node: fleet.Node, entries: tuple[gpu_isolation.IsolatedGpu, ...], plugin: str
) -> str:
    """Why the mechanisms must be applied again now ("" : they hold)."""
    fresh = [e.uuid for e in entries if not e.applied_boot]
    if fresh:
        return f"not applied yet: {', '.join(fresh)}"
    if any(e.applied_boot != node.boot_id for e in entries):
        return f"the node booted again (boot {node.boot_id[:8]}): compute mode is back to Default"
    expected = gpu_isolation.expected_capacity(entries)
    via_plugin = any(gpu_isolation.Mechanism.DEVICE_PLUGIN in e.mechanisms for e in entries)
    if via_plugin and expected is not None and node.gpu_allocatable > expected:
        return (
            f"the device plugin advertises {node.gpu_allocatable} GPUs, expected {expected}: "
            "it restarted without the exclusion"
        )
    if via_plugin:
        labels = gpu_isolation.plugin_labels(entries, operator=_operator(node))
        for key, value in labels.items():
            if node.labels.get(key) != value:
                return f"the node lost its label {key}={value}"
    seen = {e.plugin for e in entries if e.plugin}
    if plugin and seen and plugin not in seen:
        return f"the device plugin restarted ({plugin}): a GPU reset or operand restart"
    return ""


def _returns(
    node: fleet.Node,
    entries: tuple[gpu_isolation.IsolatedGpu, ...],
    ledger: Sequence[faults.LedgerEntry] | None,
) -> tuple[set[str], dict[str, str]]:
    """The GPUs a person asked back that may return now, and those refused with why."""
    asked = node.marks.gpu_return
    allowed: set[str] = set()
    refused: dict[str, str] = {}
    for entry in entries:
        if f"{REPLACED}{entry.uuid}" in asked:
            allowed.add(entry.uuid)
        elif entry.uuid in asked:
            why = _card_refusal(entry, node, ledger)
            if why:
                refused[entry.uuid] = why
            else:
                allowed.add(entry.uuid)
    return allowed, refused


def _card_refusal(
    entry: gpu_isolation.IsolatedGpu, node: fleet.Node, ledger: Sequence[faults.LedgerEntry] | None
) -> str:
    if ledger is None:
        return "the fault ledger cannot be read: the card's history is unknown"
    history = escalation.history_for(ledger, entry.uuid, node.name, entry.pci or None)
    level = escalation.escalate(history)
    if level is escalation.Escalation.REPLACEMENT:
        return (
            f"card history: {len(history.card_faults)} faults, replacement asked; swap the card "
            f"and write {REPLACED}{entry.uuid} in {annotation_keys.GPU_RETURN}"
        )
    if level is escalation.Escalation.SLOT_CHECK:
        return "slot history: two cards failed in this slot; check the slot first"
    return ""


@dataclass(frozen=True, slots=True)
class Applied:
    ok: bool
    annotations: dict[str, str | None]
    labels: dict[str, str | None]
    detail: str
    reason: Reason | None = None  # the Event's reason where the step does not imply it


def after_apply(
    node: fleet.Node, plan_: Plan, message: str | None, now: datetime
) -> Applied:
    """The node's marks after the isolation Job's report (``message``)."""
    gpus, problem = _report(message, plan_.uuids, want_mode="PROHIBITED", excluded=True)
    if problem:
        return Applied(False, {}, {}, problem)
    current = node.marks.gpus
    plugin = any(gpu_isolation.Mechanism.DEVICE_PLUGIN in e.mechanisms for e in current)
    labels = gpu_isolation.plugin_labels(current, operator=_operator(node))
    if plugin and labels[gpu_isolation.DEVICE_PLUGIN_LABEL] is None:
        return Applied(False, {}, {}, "no per-node device plugin fits: a GPU's index or the "
                       "node's GPU count is unknown")
    labelled = all(node.labels.get(k) == v for k, v in labels.items())
    # A new label restarts the plugin: its new pod is recorded once it runs (Step.RECORD).
    stamp = plan_.plugin if labelled or not plugin else ""
    entries = tuple(
        e.applied(node.boot_id, now, stamp, confirmed=gpus[e.uuid].get("kernel_fault") is True)
        if e.uuid in gpus
        else e
        for e in current
    )
    return Applied(
        True,
        {annotation_keys.GPU_ISOLATED: gpu_isolation.to_annotation(entries)},
        labels if plugin else {},
        f"GPU {', '.join(plan_.uuids)}: compute mode PROHIBITED, excluded from the device "
        f"plugin; applied on boot {node.boot_id[:8]} ({plan_.detail})",
    )


def record(node: fleet.Node, plan_: Plan) -> dict[str, str | None]:
    """The marks once the device plugin runs again with the exclusion: its pod, so that its
    next restart is noticed."""
    entries = tuple(replace(e, plugin=plan_.plugin) for e in node.marks.gpus)
    return {annotation_keys.GPU_ISOLATED: gpu_isolation.to_annotation(entries)}


def overdue(
    node: fleet.Node, now: datetime, deadline: timedelta
) -> tuple[gpu_isolation.IsolatedGpu, ...]:
    """Isolated cards that have waited longer than the RMA deadline."""
    return tuple(e for e in node.marks.gpus if now - e.at > deadline)


def request(
    node: fleet.Node, ledger: Sequence[faults.LedgerEntry], catalog: xid_catalog.XidCatalog
) -> str:
    """The drafted request for the node's isolated GPUs, one paragraph per card: which GPU is
    out, that the node keeps serving, the repair its Xid needs, and the card's and slot's
    history with their escalation (the same words as a node's request)."""
    return "\n\n".join(_request(node, e, ledger, catalog) for e in node.marks.gpus)


def _request(
    node: fleet.Node,
    entry: gpu_isolation.IsolatedGpu,
    ledger: Sequence[faults.LedgerEntry],
    catalog: xid_catalog.XidCatalog,
) -> str:
    code = entry.fault.removeprefix("xid-")
    xid = int(code) if code.isdigit() else None
    line = faults.LedgerEntry(
        entry.at, node.name, xid, entry.pci or None, entry.uuid, faults.Recorder.GPUGUARD
    )
    history = escalation.history_for(ledger, entry.uuid, node.name, entry.pci or None)
    verdict = xid_catalog.default_verdict(xid) if xid else decisions.Verdict.HUMAN_DIAGNOSIS
    words = escalation.request_text(
        line, verdict, history, escalation.escalate(history), catalog=catalog
    )
    return (
        f"GPU {entry.index} of {node.name} is out of service ({entry.mechanism}); the node keeps "
        f"serving with its other GPUs. {words}"
    )


def after_return(node: fleet.Node, plan_: Plan, message: str | None) -> Applied:
    """The node's marks once the undo Job ran: the GPUs go to their burn-in when compute mode
    is back to Default and no row remap is pending (or failed); otherwise they are held again
    (applied at the next tick) and the return request is dropped, with why."""
    gpus, problem = _report(message, plan_.uuids, want_mode="DEFAULT", excluded=False)
    pending = [u for u in plan_.uuids if gpus.get(u, {}).get("remap_pending") is True]
    if pending:
        problem = (f"row remap pending or failed on {', '.join(pending)}: a GPU reset applies "
                   "a pending remap; a failed remap needs the card replaced")
    if problem:
        return _held_again(node, plan_.uuids, f"GPU {', '.join(plan_.uuids)} stays out: {problem}")
    asked = node.marks.gpu_return
    gone = tuple(u for u in plan_.uuids if f"{REPLACED}{u}" in asked)  # left the host
    testing = tuple(u for u in plan_.uuids if u not in gone)
    if not testing:
        return _removed(node, gone, f"GPU {', '.join(gone)} replaced: off the list")
    entries = tuple(
        replace(e, returning=True) if e.uuid in testing else e
        for e in node.marks.gpus if e.uuid not in gone
    )
    return Applied(
        True,
        {annotation_keys.GPU_ISOLATED: gpu_isolation.to_annotation(entries)},
        {},
        f"GPU {', '.join(testing)}: card history allows a return, no row remap pending, "
        "compute mode Default; its own burn-in runs next (still not advertised)",
        Reason.GPU_RETURN_CHECKED,
    )


def after_burnin(node: fleet.Node, plan_: Plan, succeeded: bool, message: str | None) -> Applied:
    """The node's marks once the returning GPU's burn-in ended: back in service when it passed
    (the node labels now let the device plugin advertise it), held again when it did not."""
    passed, why = _burnin_result(succeeded, message)
    if not passed:
        return _held_again(node, plan_.uuids, f"GPU {', '.join(plan_.uuids)} stays out: "
                           f"its burn-in failed ({why})")
    return _removed(node, plan_.uuids,
                    f"GPU {', '.join(plan_.uuids)} back in service: its burn-in passed ({why})")


def _removed(node: fleet.Node, uuids: tuple[str, ...], detail: str) -> Applied:
    """The marks without ``uuids``; the last one removes the request and the plugin labels."""
    left = tuple(e for e in node.marks.gpus if e.uuid not in uuids)
    done = {*uuids, *(f"{REPLACED}{u}" for u in uuids)}
    asked = sorted(node.marks.gpu_return - done)
    annotations: dict[str, str | None] = {
        annotation_keys.GPU_ISOLATED: gpu_isolation.to_annotation(left),
        annotation_keys.GPU_RETURN: ",".join(asked) if left and asked else None,
        **({} if left else {annotation_keys.GPU_REQUEST: None}),
    }
    via_plugin = any(gpu_isolation.Mechanism.DEVICE_PLUGIN in e.mechanisms for e in left)
    labels = gpu_isolation.plugin_labels(left if via_plugin else (), operator=_operator(node))
    return Applied(True, annotations, labels, detail, Reason.GPU_RETURNED)


def _held_again(node: fleet.Node, uuids: tuple[str, ...], detail: str) -> Applied:
    entries = tuple(e.held_again() if e.uuid in uuids else e for e in node.marks.gpus)
    annotations: dict[str, str | None] = {
        annotation_keys.GPU_ISOLATED: gpu_isolation.to_annotation(entries),
        annotation_keys.GPU_RETURN: None,
    }
    return Applied(True, annotations, {}, detail, Reason.GPU_RETURN_FAILED)


def _burnin_result(succeeded: bool, message: str | None) -> tuple[bool, str]:
    """Whether the burn-in passed, and its failed checks (or its checks' count)."""
    try:
        data = json.loads(message or "")
        checks = [c for c in data.get("checks", []) if isinstance(c, dict)]
        passed = data["passed"] is True
    except (ValueError, KeyError, TypeError, AttributeError):
        return False, f"no burn-in report: {(message or '')[:200]!r}"
    failed = [f"{c.get('check')}: {c.get('evidence', '')}" for c in checks
              if c.get("status") != decisions.CheckStatus.PASS]
    if passed and succeeded:
        return True, f"{len(checks)} checks passed"
    return False, "; ".join(failed) or "the Job failed"


def _report(
    message: str | None, uuids: tuple[str, ...], *, want_mode: str, excluded: bool
) -> tuple[dict[str, dict[str, object]], str]:
    """The report's GPUs by UUID, and what is wrong with it ("" : every GPU as wanted). A GPU
    the driver does not know (``absent``: ``NVreg_ExcludedGpus`` at boot, or the card left
    the host) is out when isolating and gone when returning."""
    try:
        data = json.loads(message or "")
        gpus = {str(g["uuid"]): g for g in data["gpus"]}
    except (ValueError, KeyError, TypeError):
        return {}, f"the isolation Job's report is unreadable: {(message or '')[:200]!r}"
    problems = []
    for uuid in uuids:
        gpu = gpus.get(uuid)
        if gpu is None:
            problems.append(f"{uuid}: not in the report")
            continue
        mode = str(gpu.get("compute_mode", ""))
        mode_ok = mode in (want_mode, "absent")  # a card the driver does not attach is out
        if gpu.get("error") or not mode_ok or gpu.get("excluded") is not excluded:
            problems.append(
                f"{uuid}: compute mode {mode}, excluded {gpu.get('excluded')}"
                + (f", {gpu['error']}" if gpu.get("error") else "")
            )
    return gpus, "; ".join(problems)


def failed_cordon(node: fleet.Node, detail: str, now_text: str) -> decisions.Action:
    """The node isolation that replaces a GPU isolation whose mechanisms did not hold."""
    entries = node.marks.gpus
    first = entries[0] if entries else None
    marks = {
        annotation_keys.REASON: first.fault if first else "gpu-isolation-failed",
        annotation_keys.ISOLATED_AT: now_text,
        annotation_keys.BOOT_ID: node.boot_id,
        annotation_keys.GPU_CAPACITY: str(node.gpu_capacity),
    }
    if first is not None:
        marks |= {annotation_keys.GPU_UUID: first.uuid, annotation_keys.GPU_PCI: first.pci}
    return decisions.Action(
        kind=decisions.ActionKind.ISOLATE,
        node=node.name,
        reason=Reason.GPU_ISOLATION_FAILED,
        annotations=marks,
        detail=f"the GPU isolation did not hold, the node is isolated instead: {detail}",
    )
