"""Which GPUs carry a current hardware Xid, read from the best source each node has.

Best first (docs/design.md#detection): the agent's ``gpuguard_xid_total`` counter (every occurrence,
no masking problem); dcgm-exporter's ``DCGM_EXP_XID_ERRORS_COUNT`` per ``xid``; else the
``DCGM_FI_DEV_XID_ERRORS`` gauge, which holds only the LAST Xid value. On the gauge, a value is
current unless the value 24 h ago is *the same* value — so a user Xid yesterday never masks a
hardware Xid today (the seed's ``unless … offset 24h`` blind spot). User-class codes never
count. The agent's "fallen off the bus" counter counts whatever the Xid source is.

``all_signals`` adds the agent's node condition (docs/design.md#fast-path): ``GpuFallenOffBus``
with reason ``GpuGoneFromBus`` — the kernel said so and the card's config space reads all
ones — is a signal per GPU its message names (Xid 79 when named, else "fallen off the bus"),
seconds before any scrape. A card Prometheus already shows with the same fault keeps only its
Prometheus signal, so one fault is one signal (``model.faults.fault_identity``).

The persistent-state conditions are signals too (``node_conditions.persistent_faults``,
docs/xid-events.md#persistent-states): ``GpuRecoveryRequired`` is the Xid 154 of each GPU it
names (the driver still asks for a reset or reboot, whether or not its line was seen), and
``GpuFabricFault`` (a fatal NVSwitch SXid, a failed fabric registration) is one node-wide
``fabric`` signal, named by its first switch code (``sxid-20034``) or
``fabric-registration-failed``. No other condition, reason or status is a signal.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from gpuguard.kernlog import messages
from gpuguard.model import decisions, faults, fleet, node_conditions, pci, series
from gpuguard.model import metric_names as names
from gpuguard.model.series import gpu_of

node_of = series.node_of  # one label rule (model.series); callers read it from here too


class XidClassifier(Protocol):
    """What the policy needs of the Xid catalog (with the cluster's overrides applied).

    ``is_hardware_event`` classes one counted event by the rule it matched (the agent's
    ``rule`` label, ``catalog.events``); an empty rule falls back to the code's class.
    """

    def is_hardware(self, code: int) -> bool: ...

    def is_hardware_event(self, code: int, rule: str) -> bool: ...


class XidSource(StrEnum):
    AGENT = "agent"
    DCGM_COUNT = "dcgm-count"
    DCGM_GAUGE = "dcgm-gauge"
    WITHHELD = "withheld"  # kept pending by the breaker's mark on the node (model.withheld)
    CONDITION = "node-condition"  # the agent's GpuFallenOffBus/GpuGoneFromBus on the Node


@dataclass(frozen=True, slots=True)
class HardwareXid:
    """A hardware fault signal on one GPU. ``xid`` is None for "fallen off the bus"."""

    node: str
    gpu: str
    xid: int | None
    source: XidSource
    evidence: decisions.Evidence
    uuid: str | None = None
    pci: str | None = None
    count: float = 1.0  # occurrences so far for counted sources; a gauge's value is no count
    fabric: str = ""  # a node-wide NVLink fabric fault's label (no Xid, no card): see above

    @property
    def fallen_off_bus(self) -> bool:
        return self.xid is None and not self.fabric

    @property
    def label(self) -> str:
        """The annotation form of the fault: ``xid-79``, ``fallen-off-bus`` or the fabric's."""
        if self.fabric:
            return self.fabric
        return "fallen-off-bus" if self.xid is None else f"xid-{self.xid}"


_XID_SERIES = frozenset((
    names.FALLEN_OFF_BUS_RECENT, names.XID_TOTAL_RECENT, names.XID_COUNT_RECENT,
    names.DCGM_XID_LAST, names.XID_LAST_24H_AGO,
))  # fmt: skip
"""The series ``_node_signals`` reads."""


def hardware_xids(
    samples: Iterable[fleet.MetricSample], classifier: XidClassifier
) -> dict[str, list[HardwareXid]]:
    """Current hardware Xid signals per node, each from that node's best source. A series
    that claims a node other than its scrape target's is read for no node
    (``model.series.claimed_node``; ``forgeries`` reports it)."""
    families: dict[str, dict[str, list[fleet.MetricSample]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for sample in samples:
        if sample.name not in _XID_SERIES:
            continue  # of the tick's ~10 series per GPU, only these say anything of Xids
        node = node_of(sample.labels)
        if node is not None and series.claimed_node(sample.labels) is None:
            families[node][sample.name].append(sample)
    return {
        node: signals
        for node, by_name in families.items()
        if (signals := _node_signals(node, by_name, classifier))
    }


def forgeries(samples: Iterable[fleet.MetricSample]) -> list[decisions.Finding]:
    """One finding per scrape target and node it claims: Xid series exported by a target
    for a node it does not run on (docs/security.md#metric-forgery). The finding is on the
    target's node and names the target (job, namespace, pod, instance)."""
    found: dict[tuple[str, str, str], fleet.MetricSample] = {}
    for sample in samples:
        if sample.name not in _XID_SERIES:
            continue
        claimed = series.claimed_node(sample.labels)
        if claimed is not None:
            key = (sample.labels["node"], claimed, series.source_of(sample.labels))
            found.setdefault(key, sample)
    return [
        decisions.Finding(
            kind="metric-forgery",
            node=target,
            reason=decisions.Reason.FORGED_SERIES,
            evidence=(_evidence(sample, f"claims node {claimed}"),),
            detail=f"{source} on {target} exports {sample.name.split()[0]} for node {claimed}: "
            "not read (a series is read only for its scrape target's node)",
        )
        for (target, claimed, source), sample in sorted(found.items(), key=lambda kv: kv[0])
    ]


def all_signals(
    snapshot: fleet.FleetSnapshot, classifier: XidClassifier
) -> dict[str, list[HardwareXid]]:
    """``hardware_xids`` of the samples, then each node's condition signals for the cards
    Prometheus does not show with the same fault yet."""
    merged = hardware_xids(snapshot.samples, classifier)
    for node in snapshot.nodes:
        scraped = merged.get(node.name, [])
        extra = [s for s in condition_xids(node) if not any(_same_fault(s, p) for p in scraped)]
        if extra:
            merged[node.name] = [*scraped, *extra]
    return merged


def condition_xids(node: fleet.Node) -> list[HardwareXid]:
    """The node's ``GpuFallenOffBus``/``GpuGoneFromBus`` condition as one signal per GPU it
    names (one "fallen off the bus" on GPU ``?`` when it names none), then its persistent-state
    conditions' signals."""
    persistent = [s for c in node_conditions.persistent_faults(node.gpu_conditions)
                  for s in _persistent(node.name, c)]
    condition = node_conditions.unambiguous_fault(node.gpu_conditions)
    if condition is None:
        return persistent
    evidence = condition_evidence(node.name, condition)
    named = condition.gpus or (node_conditions.GpuNamed(gpu="?"),)
    return [
        HardwareXid(
            node=node.name,
            gpu=g.gpu,
            xid=faults.FALLEN_OFF_BUS_XID if g.xid == faults.FALLEN_OFF_BUS_XID else None,
            source=XidSource.CONDITION,
            evidence=evidence,
            uuid=g.uuid,
            pci=g.pci,
        )
        for g in named
    ] + persistent


def condition_evidence(node: str, condition: node_conditions.GpuCondition) -> decisions.Evidence:
    """A node condition as the evidence of the signal it makes (its transition time is when)."""
    return decisions.Evidence(
        source=f"node/{node} condition {condition.type}",
        value=f"{condition.reason}: {condition.message}",
        at=condition.last_transition,
        labels={"type": condition.type, "reason": condition.reason},
    )


FABRIC_REGISTRATION = "fabric-registration-failed"


def is_fabric_label(label: str) -> bool:
    """Whether an isolation reason names a fabric fault (``sxid-20034``, the registration)."""
    return label == FABRIC_REGISTRATION or (
        label.startswith("sxid-") and label.removeprefix("sxid-").isdecimal()
    )


def _persistent(node: str, condition: node_conditions.GpuCondition) -> list[HardwareXid]:
    evidence = condition_evidence(node, condition)
    if condition.type == node_conditions.GPU_FABRIC_FAULT:
        code = condition.message.partition(" sxid=")[2].partition(",")[0].partition(";")[0]
        fatal_sxid = condition.reason == node_conditions.FATAL_SXID and code.isdecimal()
        label = f"sxid-{code}" if fatal_sxid else FABRIC_REGISTRATION
        return [HardwareXid(node, "?", None, XidSource.CONDITION, evidence, fabric=label)]
    named = condition.gpus or (node_conditions.GpuNamed("?", xid=messages.RECOVERY_ACTION_XID),)
    return [
        HardwareXid(node, g.gpu, g.xid, XidSource.CONDITION, evidence, uuid=g.uuid, pci=g.pci)
        for g in named
        if g.xid is not None
    ]


def _same_fault(condition: HardwareXid, scraped: HardwareXid) -> bool:
    """Prometheus shows the condition's fault on the same card: Xid 79 or "fallen off the
    bus" (one fault), or the same Xid (154); an unnamed condition matches any such signal on
    the node. A fabric signal has no Prometheus twin."""
    if condition.fabric:
        return False
    if condition.xid not in (None, faults.FALLEN_OFF_BUS_XID):
        if scraped.xid != condition.xid:
            return False
    elif not (scraped.fallen_off_bus or scraped.xid == faults.FALLEN_OFF_BUS_XID):
        return False
    if condition.gpu == "?":
        return True
    if condition.uuid and scraped.uuid:
        return condition.uuid == scraped.uuid
    here = pci.try_normalize_pci(condition.pci)
    return here is not None and here == pci.try_normalize_pci(scraped.pci)


def _node_signals(
    node: str, by_name: Mapping[str, list[fleet.MetricSample]], classifier: XidClassifier
) -> list[HardwareXid]:
    signals = _fallen_off_bus(node, by_name.get(names.FALLEN_OFF_BUS_RECENT, []))
    if by_name.get(names.XID_TOTAL_RECENT):
        signals += _counted(node, by_name[names.XID_TOTAL_RECENT], XidSource.AGENT, classifier)
    elif by_name.get(names.XID_COUNT_RECENT):
        signals += _counted(
            node, by_name[names.XID_COUNT_RECENT], XidSource.DCGM_COUNT, classifier
        )
    else:
        signals += _from_gauge(
            node,
            by_name.get(names.DCGM_XID_LAST, []),
            by_name.get(names.XID_LAST_24H_AGO, []),
            classifier,
        )
    return signals


def _evidence(sample: fleet.MetricSample, value: str) -> decisions.Evidence:
    return decisions.Evidence(
        source=sample.name, value=value, at=sample.timestamp, labels=dict(sample.labels)
    )


def _counted(
    node: str,
    samples: list[fleet.MetricSample],
    source: XidSource,
    classifier: XidClassifier,
) -> list[HardwareXid]:
    signals = []
    for sample in samples:
        code = _int_or_none(sample.labels.get("xid"))
        if code is None or sample.value <= 0 or not _hardware(classifier, code, sample):
            continue
        signals.append(
            HardwareXid(
                node=node,
                gpu=gpu_of(sample.labels),
                xid=code,
                source=source,
                evidence=_evidence(sample, f"{sample.value:g} occurrence(s) of Xid {code}"),
                uuid=sample.labels.get("uuid") or sample.labels.get("UUID"),
                pci=sample.labels.get("pci"),
                count=sample.value,
            )
        )
    return signals


def _hardware(classifier: XidClassifier, code: int, sample: fleet.MetricSample) -> bool:
    return is_hardware(classifier, code, sample.labels.get("rule", ""))


def is_hardware(classifier: XidClassifier, code: int, rule: str) -> bool:
    """Whether one counted event of ``code`` that matched ``rule`` is a hardware fault."""
    return classifier.is_hardware_event(code, rule) if rule else classifier.is_hardware(code)


def _from_gauge(
    node: str,
    current: list[fleet.MetricSample],
    day_ago: list[fleet.MetricSample],
    classifier: XidClassifier,
) -> list[HardwareXid]:
    yesterday = {_gpu_key(s.labels): s.value for s in day_ago}
    signals = []
    for sample in current:
        code = int(sample.value)
        if code <= 0 or not classifier.is_hardware(code):
            continue
        if yesterday.get(_gpu_key(sample.labels)) == sample.value:
            continue  # the same value 24 h ago: this Xid is old news, already handled
        signals.append(
            HardwareXid(
                node=node,
                gpu=gpu_of(sample.labels),
                xid=code,
                source=XidSource.DCGM_GAUGE,
                evidence=_evidence(sample, f"last Xid {code}"),
                uuid=sample.labels.get("UUID"),
                pci=sample.labels.get("pci_bus_id"),
            )
        )
    return signals


def _fallen_off_bus(node: str, samples: list[fleet.MetricSample]) -> list[HardwareXid]:
    return [
        HardwareXid(
            node=node,
            gpu=gpu_of(s.labels),
            xid=None,
            source=XidSource.AGENT,
            evidence=_evidence(s, "GPU has fallen off the bus (kernel)"),
            uuid=s.labels.get("uuid"),
            pci=s.labels.get("pci"),
            count=s.value,
        )
        for s in samples
        if s.value > 0
    ]


def _gpu_key(labels: Mapping[str, str]) -> str:
    return labels.get("UUID") or labels.get("gpu") or ""


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
