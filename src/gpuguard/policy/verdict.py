"""The repair an isolated node needs, judged from its evidence bundle
(docs/design.md#evidence-and-verdict).

Pure: ``decide(bundle, catalog)`` reads what the evidence Job collected and returns the verdict,
the rule that fired and the evidence it rests on. Rules, first match wins:

1. ``config-space-all-ff``: a GPU's PCI config space reads all ff -> power cycle. A reset cannot
   reach a device that does not answer on the bus (the 9/21 case: the driver said Xid 154
   "GPU Reset Required", the config space read ff, only a power cycle helped).
2. ``xid79-or-fallen-off-bus``: Xid 79 or the driver's "fallen off the bus" message -> power
   cycle.
3. A reset-class code (48/94/95/119/120, ``catalog.xid.default_verdict``) on GPUs whose config
   space reads healthy:
   - the driver's latest Xid 154 advice on any GPU is "Node Reboot Required" ->
     ``reset-code-driver-requires-node-reboot``: power cycle (a GPU reset would not satisfy the
     driver, and a soft reboot can hang on a dead GPU; the power cycle covers both);
   - otherwise ``reset-code-healthy-config`` -> GPU reset procedure;
   - a GPU with the code whose config space could not be read (or that left sysfs) ->
     ``reset-code-config-unconfirmed``: human diagnosis (a reset is chosen only on evidence).
4. ``xid143-rma``: Xid 143 -> RMA.
5. ``other-codes`` / ``no-fault-evidence`` / ``kernel-log-unread``: human diagnosis (the last
   says the kernel log could not be read, so "no Xid" is not known).

The driver's advice (Xid 154) is always shown as ``driver_advice``. It may escalate a verdict
(rule 3) but never lowers one: config space and fall-off evidence outrank it. Root-port AER
errors and GPUs missing from sysfs are reported in ``notes``; they do not change the verdict.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuguard.catalog import xid as xid_catalog
from gpuguard.model import decisions
from gpuguard.model import evidence as evidence_model
from gpuguard.model import xid as xid_model

Verdict = decisions.Verdict
Rule = evidence_model.VerdictRule
ANY_GPU = "any GPU"  # an event whose PCI address the log redacted


def decide(
    bundle: evidence_model.EvidenceBundle, catalog: xid_catalog.XidCatalog
) -> evidence_model.VerdictDecision:
    """The verdict for one node's evidence bundle (the rules in this module's docstring)."""
    decision = (
        _config_space_all_ff(bundle)
        or _fell_off_bus(bundle, catalog)
        or _reset_codes(bundle, catalog)
        or _coded(bundle, catalog, Verdict.RMA, Rule.RMA_CODE)
        or _anything_else(bundle, catalog)
    )
    return evidence_model.VerdictDecision(
        verdict=decision.verdict,
        rule=decision.rule,
        evidence=decision.evidence,
        driver_advice=_driver_advice(bundle.xid_events),
        notes=decision.notes + _advice_note(bundle, decision.verdict) + _side_notes(bundle),
    )


def _config_space_all_ff(
    bundle: evidence_model.EvidenceBundle,
) -> evidence_model.VerdictDecision | None:
    dead = [gpu for gpu in bundle.gpus if gpu.config_all_ff is True]
    if not dead:
        return None
    facts = tuple(
        decisions.Evidence("pci-config", "all 0xff", labels={"gpu": gpu.pci}) for gpu in dead
    )
    return evidence_model.VerdictDecision(Verdict.POWER_CYCLE, Rule.CONFIG_SPACE_ALL_FF, facts)


def _fell_off_bus(
    bundle: evidence_model.EvidenceBundle, catalog: xid_catalog.XidCatalog
) -> evidence_model.VerdictDecision | None:
    gone = [
        event
        for event in bundle.xid_events
        if event.kind is xid_model.KernelEventKind.FALLEN_OFF_BUS
        or (event.xid is not None and xid_catalog.default_verdict(event.xid) is Verdict.POWER_CYCLE)
    ]
    if not gone:
        return None
    return evidence_model.VerdictDecision(
        Verdict.POWER_CYCLE, Rule.FELL_OFF_BUS, _events_evidence(gone, catalog)
    )


def _reset_codes(
    bundle: evidence_model.EvidenceBundle, catalog: xid_catalog.XidCatalog
) -> evidence_model.VerdictDecision | None:
    events = _events_with_verdict(bundle.xid_events, Verdict.GPU_RESET)
    if not events:
        return None
    facts = _events_evidence(events, catalog)
    unconfirmed = _unconfirmed_gpus(bundle, events)
    if unconfirmed:
        note = f"config space not confirmed healthy on {', '.join(unconfirmed)}: no reset chosen"
        return evidence_model.VerdictDecision(
            Verdict.HUMAN_DIAGNOSIS, Rule.RESET_CODE_CONFIG_UNCONFIRMED, facts, notes=(note,)
        )
    reboot = [
        e
        for e in _latest_advice_per_gpu(bundle.xid_events)
        if e.recovery_action is xid_model.RecoveryAction.NODE_REBOOT_REQUIRED
    ]
    if reboot:
        facts += _events_evidence(reboot, catalog)
        return evidence_model.VerdictDecision(
            Verdict.POWER_CYCLE, Rule.DRIVER_REQUIRES_NODE_REBOOT, facts
        )
    facts += tuple(_healthy_config_evidence(bundle, events))
    return evidence_model.VerdictDecision(Verdict.GPU_RESET, Rule.RESET_CODE_HEALTHY_CONFIG, facts)


def _coded(
    bundle: evidence_model.EvidenceBundle,
    catalog: xid_catalog.XidCatalog,
    verdict: decisions.Verdict,
    rule: evidence_model.VerdictRule,
) -> evidence_model.VerdictDecision | None:
    events = _events_with_verdict(bundle.xid_events, verdict)
    if not events:
        return None
    return evidence_model.VerdictDecision(verdict, rule, _events_evidence(events, catalog))


def _anything_else(
    bundle: evidence_model.EvidenceBundle, catalog: xid_catalog.XidCatalog
) -> evidence_model.VerdictDecision:
    if bundle.xid_events:
        facts = _events_evidence(bundle.xid_events, catalog)
        return evidence_model.VerdictDecision(Verdict.HUMAN_DIAGNOSIS, Rule.OTHER_CODES, facts)
    unknown = [gpu.pci for gpu in bundle.gpus if gpu.config_all_ff is None]
    config = f"config space unknown on {', '.join(unknown)}" if unknown else "no config space ff"
    if bundle.kernel_log is None:
        note = f"the kernel log could not be read: no Xid evidence either way; {config}"
        return evidence_model.VerdictDecision(
            Verdict.HUMAN_DIAGNOSIS, Rule.KERNEL_LOG_UNREAD, notes=(note,)
        )
    note = f"no Xid and no fall-off message in {bundle.kernel_log.source}; {config}"
    return evidence_model.VerdictDecision(
        Verdict.HUMAN_DIAGNOSIS, Rule.NO_FAULT_EVIDENCE, notes=(note,)
    )


# ---- reading the bundle ----------------------------------------------------------------------


def _events_with_verdict(
    events: Iterable[xid_model.KernelEvent], verdict: decisions.Verdict
) -> list[xid_model.KernelEvent]:
    return [
        e for e in events if e.xid is not None and xid_catalog.default_verdict(e.xid) is verdict
    ]


def _unconfirmed_gpus(
    bundle: evidence_model.EvidenceBundle, events: list[xid_model.KernelEvent]
) -> list[str]:
    """GPUs named by ``events`` whose config space is not known to read healthy."""
    healthy = {gpu.pci for gpu in bundle.gpus if gpu.present and gpu.config_all_ff is False}
    named = {e.pci for e in events}
    if None in named:  # a redacted address: every GPU must be healthy
        all_known = bool(bundle.gpus) and all(gpu.pci in healthy for gpu in bundle.gpus)
        return [] if all_known else [ANY_GPU]
    return sorted(pci for pci in named if pci is not None and pci not in healthy)


def _healthy_config_evidence(
    bundle: evidence_model.EvidenceBundle, events: list[xid_model.KernelEvent]
) -> Iterable[decisions.Evidence]:
    named = {e.pci for e in events}
    for gpu in bundle.gpus:
        if None in named or gpu.pci in named:
            yield decisions.Evidence(
                "pci-config", "healthy (not all 0xff)", labels={"gpu": gpu.pci}
            )


def _latest_advice_per_gpu(events: Iterable[xid_model.KernelEvent]) -> list[xid_model.KernelEvent]:
    latest: dict[str | None, xid_model.KernelEvent] = {}
    for event in events:
        if event.recovery_action is not None:
            latest[event.pci] = event
    return list(latest.values())


def _driver_advice(events: tuple[xid_model.KernelEvent, ...]) -> str | None:
    advice = _latest_advice_per_gpu(events)
    if not advice:
        return None
    return "; ".join(
        f"Xid 154 on {e.pci or ANY_GPU}: {e.recovery_action} ({e.message})" for e in advice
    )


def _advice_note(
    bundle: evidence_model.EvidenceBundle, verdict: decisions.Verdict
) -> tuple[str, ...]:
    wants_reset = [
        e
        for e in _latest_advice_per_gpu(bundle.xid_events)
        if e.recovery_action is xid_model.RecoveryAction.GPU_RESET_REQUIRED
    ]
    if verdict is Verdict.POWER_CYCLE and wants_reset:
        return (
            "the driver asked for a GPU reset (Xid 154) but the evidence above outranks it: "
            "a reset cannot reach a GPU that does not answer on the bus",
        )
    return ()


def _side_notes(bundle: evidence_model.EvidenceBundle) -> tuple[str, ...]:
    notes = [
        f"GPU {gpu.pci} is in the kernel log but missing from sysfs"
        for gpu in bundle.gpus
        if not gpu.present
    ]
    notes += [
        f"root port {port.port}: AER fatal {port.fatal}, non-fatal {port.nonfatal}"
        for port in bundle.root_ports
        if port.uncorrectable
    ]
    return tuple(notes)


def _distinct_codes(events: Iterable[xid_model.KernelEvent]) -> list[xid_model.KernelEvent]:
    """The last event of each (kind, code, GPU): evidence stays short on a noisy log."""
    last: dict[tuple[str, int | None, str | None], xid_model.KernelEvent] = {}
    for event in events:
        last[(event.kind, event.xid, event.pci)] = event
    return list(last.values())


def _events_evidence(
    events: Iterable[xid_model.KernelEvent], catalog: xid_catalog.XidCatalog
) -> tuple[decisions.Evidence, ...]:
    return tuple(_event_evidence(e, catalog) for e in _distinct_codes(events))


def _event_evidence(
    event: xid_model.KernelEvent, catalog: xid_catalog.XidCatalog
) -> decisions.Evidence:
    if event.xid is None:
        value = f"fallen off the bus: {event.message}"
    else:
        value = f"Xid {event.xid} ({catalog.entry(event.xid).name}): {event.message}"
    labels = {"gpu": event.pci or ANY_GPU, "line": str(event.line_no)}
    return decisions.Evidence("kernel-log", value, at=event.timestamp, labels=labels)
