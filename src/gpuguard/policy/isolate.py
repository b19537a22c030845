"""Decide which nodes to auto-cordon this tick (docs/design.md#isolation, docs/breaker.md).

A node is isolated when a hardware Xid coincides with GPU loss (capacity > allocatable) held
through the hold window, or when its agent's ``GpuFabricFault`` condition (a fatal NVSwitch
SXid, a failed fabric registration: the GPUs stay on the bus, their NVLink peers are gone) has
held through the hold window (docs/xid-events.md#persistent-states); unambiguous faults
(Xid 79, the kernel's "fallen off the bus") with the GPU gone take a fast path on the first
tick that sees both. Never a node a human cordoned, never more than N per tick, never past the
breaker (``policy.admission``), through which the opt-in phantom cordons pass too. Everything
not acted on becomes a finding with its reason, so ``explain`` can say why a node was left
alone; a fault the breaker withholds is marked on its
node (``model.withheld``) so it stays pending and visible until the breaker allows it, and is
isolated then if it still holds (the GPU still gone), even after its Xid left the lookback.

A pure function: no I/O, no clock (``snapshot.taken_at`` is now).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpuguard.model import (
    annotation_keys,
    decisions,
    faults,
    fleet,
    gpu_isolation,
    node_conditions,
    pci,
    timestamps,
    withheld,
)
from gpuguard.model import metric_names as names
from gpuguard.model import settings as settings_model
from gpuguard.policy import admission, gpu_pods, gpu_scope, xid_signals

Reason = decisions.Reason


@dataclass(frozen=True, slots=True)
class Marking:
    """A change to a node's ``gpuguard.io/withheld`` mark (None removes it)."""

    node: str
    value: str | None
    reason: Reason
    detail: str

    @property
    def annotations(self) -> dict[str, str | None]:
        return {withheld.KEY: self.value}


@dataclass(frozen=True, slots=True)
class IsolationDecision:
    actions: tuple[decisions.Action, ...]
    findings: tuple[decisions.Finding, ...]
    breaker: admission.BreakerState
    markings: tuple[Marking, ...] = ()
    withheld: Mapping[str, withheld.WithheldMark] = field(default_factory=dict)
    """Faults the breaker withheld (not the per-tick limit), by node."""
    fast_path_left: tuple[str, ...] = ()
    """Fast-path faults left to the per-tick limit while the breaker had room: the loop ticks
    again at once for them (docs/design.md#fast-path)."""


@dataclass(frozen=True, slots=True)
class _Candidate:
    node: fleet.Node
    fault: xid_signals.HardwareXid
    reason: Reason
    evidence: tuple[decisions.Evidence, ...]


def is_auto_isolated(node: fleet.Node) -> bool:
    """gpuguard's cordon: unschedulable AND carrying the isolated-at mark gpuguard wrote."""
    return node.isolated_by_gpuguard


def is_human_cordoned(node: fleet.Node) -> bool:
    """Cordoned, and not by gpuguard (no marks, or marks someone else wrote): never touched."""
    return node.unschedulable and not node.isolated_by_gpuguard


def decide(
    snapshot: fleet.FleetSnapshot,
    classifier: xid_signals.XidClassifier,
    settings: settings_model.GuardSettings,
    phantom_cordons: Sequence[decisions.Action] = (),
    ledger: Sequence[faults.LedgerEntry] | None = (),
    signals: Mapping[str, list[xid_signals.HardwareXid]] | None = None,
) -> IsolationDecision:
    """This tick's isolations, withheld-marks and findings. ``phantom_cordons`` are the opt-in
    phantom isolations, admitted after the faults by the same breaker. ``ledger`` is the fault
    ledger the GPU-or-node rule reads (None: it could not be read). ``signals``: the snapshot's
    ``xid_signals.all_signals`` when the tick has them already (None: computed here)."""
    if signals is None:
        signals = xid_signals.all_signals(snapshot, classifier)
    held = _gpu_loss_held(snapshot.samples)
    candidates: dict[str, _Admissible] = {}
    findings: list[decisions.Finding] = xid_signals.forgeries(snapshot.samples)
    for node in snapshot.nodes:
        current = _not_isolated(node, signals.get(node.name, []))
        candidate, finding = _assess(node, current, held, settings, snapshot)
        if candidate is not None:
            scope = gpu_scope.decide(
                candidate.fault, current, node, ledger, settings, snapshot.taken_at
            )
            action = _isolate(candidate, snapshot, scope)
            candidates[node.name] = _Admissible(action, candidate.fault.gpu)
        if finding is not None:
            findings.append(finding)
    for action in _phantom_candidates(phantom_cordons, snapshot):
        candidates.setdefault(action.node, _Admissible(action, ""))
    return _admit(candidates, findings, snapshot, settings.isolation)


@dataclass(frozen=True, slots=True)
class _Admissible:
    action: decisions.Action
    gpu: str


def _admit(
    candidates: Mapping[str, _Admissible],
    findings: list[decisions.Finding],
    snapshot: fleet.FleetSnapshot,
    isolation: settings_model.IsolationSettings,
) -> IsolationDecision:
    gpu_nodes = [n for n in snapshot.nodes if n.gpu_capacity > 0]
    result = admission.admit(
        [admission.Candidate(name, _rank(c.action)) for name, c in candidates.items()],
        admission.history(gpu_nodes),
        admission.tripped_since(snapshot.nodes),
        len(gpu_nodes),
        isolation,
        snapshot.taken_at,
    )
    evidence = decisions.Evidence("breaker", result.state.describe(), snapshot.taken_at)
    marks: dict[str, withheld.WithheldMark] = {}
    markings: list[Marking] = []
    left: list[str] = []
    for name, why in result.withheld:
        candidate = candidates[name]
        findings.append(_withheld_finding(candidate, why, evidence))
        if why is Reason.TICK_LIMIT:
            if candidate.action.reason is Reason.FAST_PATH:
                left.append(name)
            continue
        mark, marking = _withhold(snapshot.node(name), candidate, why, snapshot)
        marks[name] = mark
        if marking is not None:
            markings.append(marking)
    markings += _cleared(snapshot, candidates)
    return IsolationDecision(
        actions=tuple(candidates[name].action for name in result.admitted),
        findings=tuple(findings),
        breaker=result.state,
        markings=tuple(markings),
        withheld=marks,
        fast_path_left=tuple(left),
    )


def _rank(action: decisions.Action) -> int:
    """Fast-path faults first, then held faults, then phantom cordons."""
    order = {Reason.FAST_PATH: 0, Reason.HARDWARE_XID_WITH_GPU_LOSS: 1,
             Reason.FABRIC_FAULT_HELD: 1}
    return order.get(action.reason, 2)


def _withheld_finding(
    candidate: _Admissible, why: Reason, breaker_evidence: decisions.Evidence
) -> decisions.Finding:
    action = candidate.action
    return decisions.Finding(
        kind="isolation",
        node=action.node,
        reason=why,
        gpu=candidate.gpu or None,
        evidence=(*action.evidence, breaker_evidence),
        detail=action.annotations.get(annotation_keys.REASON, ""),
    )


def _withhold(
    node: fleet.Node | None,
    candidate: _Admissible,
    why: Reason,
    snapshot: fleet.FleetSnapshot,
) -> tuple[withheld.WithheldMark, Marking | None]:
    """The node's withheld mark, and the write needed when it is new or its reason changed
    (the first time keeps its ``since``)."""
    old = node.marks.withheld if node is not None else None
    action = candidate.action
    marks = action.annotations
    mark = withheld.WithheldMark(
        reason=why,
        since=old.since if old is not None else snapshot.taken_at,
        fault=marks.get(annotation_keys.REASON, ""),
        gpu=candidate.gpu,
        uuid=marks.get(annotation_keys.GPU_UUID, ""),
        pci=marks.get(annotation_keys.GPU_PCI, ""),
    )
    if old is not None and old.reason is why and old.fault == mark.fault:
        return mark, None
    detail = f"{mark.fault} withheld by the breaker ({why}): pending, isolated when it allows"
    return mark, Marking(action.node, mark.to_annotation(), why, detail)


def _cleared(snapshot: fleet.FleetSnapshot, candidates: Mapping[str, _Admissible]) -> list[Marking]:
    """Marks on nodes that are no longer candidates: the fault cleared, the node was
    isolated, or a person cordoned it."""
    out = []
    for node in snapshot.nodes:
        if withheld.KEY in node.annotations and node.name not in candidates:
            detail = "the withheld fault no longer holds (or the node was cordoned)"
            out.append(Marking(node.name, None, Reason.WITHHELD_CLEARED, detail))
    return out


def _phantom_candidates(
    cordons: Sequence[decisions.Action], snapshot: fleet.FleetSnapshot
) -> list[decisions.Action]:
    """Phantom cordons completed with the marks the return policy reads; never a cordoned
    node (a person's cordon, or one gpuguard already made)."""
    out = []
    for action in cordons:
        node = snapshot.node(action.node)
        if node is None or node.unschedulable:
            continue
        marks = dict(action.annotations) | {
            annotation_keys.ISOLATED_AT: timestamps.format_utc(snapshot.taken_at),
            annotation_keys.BOOT_ID: node.boot_id,
            annotation_keys.GPU_CAPACITY: str(node.gpu_capacity),
        }
        out.append(replace(action, annotations=marks))
    return out


def _gpu_loss_held(samples: tuple[fleet.MetricSample, ...]) -> dict[str, fleet.MetricSample]:
    return {
        node: s
        for s in samples
        if s.name == names.GPU_LOSS_HELD and (node := xid_signals.node_of(s.labels))
    }


def _assess(
    node: fleet.Node,
    signals: list[xid_signals.HardwareXid],
    held: dict[str, fleet.MetricSample],
    settings: settings_model.GuardSettings,
    snapshot: fleet.FleetSnapshot,
) -> tuple[_Candidate | None, decisions.Finding | None]:
    if is_auto_isolated(node):
        return None, None
    gone = _gone_by_condition(node)
    loss = _loss_evidence(node, snapshot, gone)
    missing = gpu_isolation.unexplained_missing(node) or gone
    if not signals and (pending := _pending_fault(node)) is not None:
        if missing and not node.unschedulable:
            return _Candidate(
                node, pending, Reason.HARDWARE_XID_WITH_GPU_LOSS, (pending.evidence, loss)
            ), None
        return None, None
    if not signals:
        if missing and not node.unschedulable:
            return None, _finding(node, Reason.GPU_LOSS_WITHOUT_XID, (loss,))
        return None, None
    fault = _primary(signals, settings.isolation)
    evidence = (*_fault_evidence(fault, signals), loss)
    if is_human_cordoned(node):
        return None, _finding(node, Reason.HUMAN_CORDON, evidence, fault)
    if not missing and (fabric := next((s for s in signals if s.fabric), None)) is not None:
        return _held_fabric(node, fabric, settings.isolation, snapshot)
    if not missing:
        return None, _finding(node, Reason.HARDWARE_XID_WITHOUT_GPU_LOSS, evidence, fault)
    if _is_fast_path(fault, settings.isolation):
        return _Candidate(node, fault, Reason.FAST_PATH, evidence), None
    held_sample = held.get(node.name)
    if held_sample is None or held_sample.value <= 0:
        return None, _finding(node, Reason.HARDWARE_XID_HOLDING, evidence, fault)
    held_evidence = decisions.Evidence(
        source=f"min_over_time(gpu capacity - allocatable [{settings.isolation.hold_window}])",
        value=f"{held_sample.value:g}",
        at=held_sample.timestamp,
    )
    reason = Reason.HARDWARE_XID_WITH_GPU_LOSS
    return _Candidate(node, fault, reason, (*evidence, held_evidence)), None


def _held_fabric(
    node: fleet.Node,
    fault: xid_signals.HardwareXid,
    isolation: settings_model.IsolationSettings,
    snapshot: fleet.FleetSnapshot,
) -> tuple[_Candidate | None, decisions.Finding | None]:
    """A fabric fault isolates the node once its condition has held through the hold window
    (its transition time; none known: still holding). The GPUs stay allocatable: the loss is
    their NVLink peers, which the device plugin does not see."""
    since = fault.evidence.at
    if since is None or snapshot.taken_at - since < isolation.hold_window:
        return None, _finding(node, Reason.HARDWARE_XID_HOLDING, (fault.evidence,), fault)
    held = decisions.Evidence(
        source=f"node/{node.name} {fault.label} since", value=timestamps.format_utc(since),
        at=snapshot.taken_at,
    )
    return _Candidate(node, fault, Reason.FABRIC_FAULT_HELD, (fault.evidence, held)), None


def _primary(
    signals: list[xid_signals.HardwareXid], isolation: settings_model.IsolationSettings
) -> xid_signals.HardwareXid:
    """The fault named in the annotations: a fast-path one first, then the lowest GPU, then on
    that GPU a numbered Xid before the kernel's "fallen off the bus" message. Xid 79 *is* that
    message's code, so where both are seen the reason is ``xid-79``: the catalogue entry
    (``gpuguard xid explain 79``), the verdict and the ledger's Xid column name it whichever
    source saw it, agent or dcgm-exporter (docs/design.md#isolation)."""
    return min(
        signals,
        key=lambda s: (not _is_fast_path(s, isolation), s.gpu, s.fallen_off_bus, s.xid or 0),
    )


def _fault_evidence(
    fault: xid_signals.HardwareXid, signals: list[xid_signals.HardwareXid]
) -> tuple[decisions.Evidence, ...]:
    """The named fault's evidence, then the other signals of its GPU (the kernel's "fallen off
    the bus" message beside Xid 79), so the Event shows every source that saw it."""
    same_gpu = (s for s in signals if s is not fault and s.gpu == fault.gpu)
    return (fault.evidence, *(s.evidence for s in same_gpu))


def _is_fast_path(
    fault: xid_signals.HardwareXid, isolation: settings_model.IsolationSettings
) -> bool:
    if fault.fallen_off_bus:
        return isolation.fast_path_fallen_off_bus
    return fault.xid in isolation.fast_path_xids


def _loss_evidence(
    node: fleet.Node, snapshot: fleet.FleetSnapshot, gone: bool = False
) -> decisions.Evidence:
    value = f"{node.gpu_capacity}/{node.gpu_allocatable}"
    if gone:
        value += (f"; {node_conditions.GPU_FALLEN_OFF_BUS}/{node_conditions.GONE_FROM_BUS}: "
                  "the GPU is gone, before the kubelet's next status update lowers allocatable")
    return decisions.Evidence(
        source=f"node/{node.name} nvidia.com/gpu capacity/allocatable",
        value=value,
        at=snapshot.taken_at,
    )


def _gone_by_condition(node: fleet.Node) -> bool:
    """The agent's condition says a GPU not isolated yet is gone from the bus: that is the GPU
    loss, before the device plugin's health change reaches allocatable — the kubelet reports
    it at its next node status update, every ``nodeStatusUpdateFrequency`` (10 s by default,
    https://kubernetes.io/docs/reference/config-api/kubelet-config.v1beta1/)."""
    condition = node_conditions.unambiguous_fault(node.gpu_conditions)
    if condition is None:
        return False
    entries = node.marks.gpus
    named = condition.gpus
    return not named or any(not gpu_isolation.is_isolated(entries, g.uuid, g.pci) for g in named)


def _finding(
    node: fleet.Node,
    reason: Reason,
    evidence: tuple[decisions.Evidence, ...],
    fault: xid_signals.HardwareXid | None = None,
) -> decisions.Finding:
    return decisions.Finding(
        kind="isolation",
        node=node.name,
        reason=reason,
        gpu=fault.gpu if fault else None,
        evidence=evidence,
        detail=fault.label if fault else "",
    )


def _not_isolated(
    node: fleet.Node, signals: list[xid_signals.HardwareXid]
) -> list[xid_signals.HardwareXid]:
    """The node's signals but those of GPUs already isolated (they are out: their Xids and
    their absence from allocatable change nothing)."""
    entries = node.marks.gpus
    return [s for s in signals if not gpu_isolation.is_isolated(entries, s.uuid, s.pci)]


def _isolate(
    candidate: _Candidate, snapshot: fleet.FleetSnapshot, scope: gpu_scope.ScopeDecision
) -> decisions.Action:
    if scope.scope is gpu_isolation.Scope.GPU:
        return _isolate_gpu(candidate, snapshot, scope)
    return _cordon(candidate, snapshot, scope)


def _isolate_gpu(
    candidate: _Candidate, snapshot: fleet.FleetSnapshot, scope: gpu_scope.ScopeDecision
) -> decisions.Action:
    """One more entry in the node's ``gpuguard.io/gpu-isolated`` list; no cordon."""
    node, fault = candidate.node, candidate.fault
    entries = node.marks.gpus
    entry = gpu_isolation.IsolatedGpu(
        uuid=fault.uuid or "",
        pci=pci.try_normalize_pci(fault.pci) or fault.pci or "",
        index=fault.gpu,
        at=snapshot.taken_at,
        fault=fault.label,
        mechanism="+".join(scope.mechanisms),
        capacity=max((e.capacity for e in entries), default=node.gpu_capacity),
    )
    value = gpu_isolation.to_annotation((*entries, entry))
    return decisions.Action(
        kind=decisions.ActionKind.ISOLATE_GPU,
        node=node.name,
        reason=candidate.reason,
        evidence=(*candidate.evidence, *scope.evidence),
        annotations={annotation_keys.GPU_ISOLATED: value or ""},
        detail=f"GPU {fault.gpu} ({fault.uuid}) out, the node keeps serving: {scope.detail}"
        f"{_pods_on(fault, node.name, snapshot.samples)}",
    )


def _pods_on(
    fault: xid_signals.HardwareXid, node: str, samples: tuple[fleet.MetricSample, ...]
) -> str:
    """The pods on the faulty GPU, reported, not evicted here: each keeps its context (compute
    mode PROHIBITED stops only new ones) until it ends, a person moves it, or the opt-in
    eviction does once the GPU is held (``policy/gpu_pods.py``)."""
    found = gpu_pods.on_gpu(node, fault.uuid or "", samples)
    held, source = list(found.pods), found.source
    if not held:
        labels = fault.evidence.labels
        pod = labels.get("pod", "")
        held, source = ([f"{labels.get('namespace', '')}/{pod}"] if pod else []), gpu_pods.DCGM
    if not held:
        return ""
    return f"; pods on it ({source}): {', '.join(held)}: left running, not evicted"


def _cordon(
    candidate: _Candidate, snapshot: fleet.FleetSnapshot, scope: gpu_scope.ScopeDecision
) -> decisions.Action:
    node, fault = candidate.node, candidate.fault
    marks = {
        annotation_keys.REASON: fault.label,
        annotation_keys.ISOLATED_AT: timestamps.format_utc(snapshot.taken_at),
        annotation_keys.BOOT_ID: node.boot_id,
        annotation_keys.GPU_CAPACITY: str(node.gpu_capacity),
    }
    if fault.uuid:
        marks[annotation_keys.GPU_UUID] = fault.uuid
    if fault.pci:
        marks[annotation_keys.GPU_PCI] = fault.pci
    return decisions.Action(
        kind=decisions.ActionKind.ISOLATE,
        node=node.name,
        reason=candidate.reason,
        evidence=candidate.evidence,
        annotations=marks,
        detail=f"{fault.label} on GPU {fault.gpu} ({fault.source}), "
        f"GPUs {node.gpu_allocatable}/{node.gpu_capacity} allocatable; "
        f"the node, not the GPU ({scope.reason}): {scope.detail}",
    )


def _pending_fault(node: fleet.Node) -> xid_signals.HardwareXid | None:
    """The hardware fault a withheld mark keeps pending after its Xid left the lookback."""
    mark = node.marks.withheld
    if mark is None or not mark.hardware or xid_signals.is_fabric_label(mark.fault):
        return None  # a fabric fault holds only while its condition does (its own signal)
    code = mark.fault.removeprefix("xid-")
    return xid_signals.HardwareXid(
        node=node.name,
        gpu=mark.gpu or "?",
        xid=int(code) if code.isdecimal() else None,
        source=xid_signals.XidSource.WITHHELD,
        evidence=decisions.Evidence(
            source=f"node/{node.name} {withheld.KEY}",
            value=f"{mark.fault} withheld by the breaker ({mark.reason})",
            at=mark.since,
        ),
        uuid=mark.uuid or None,
        pci=mark.pci or None,
    )
