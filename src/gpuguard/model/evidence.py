"""The evidence bundle an evidence Job collects on an isolated node, and its compact summary.

The node side (``agent.evidence``) fills an ``EvidenceBundle`` from the host's kernel log,
sysfs and (when the driver answers) ``nvidia-smi``; the pure verdict policy (``policy.verdict``)
reads it; the controller reads the ``EvidenceSummary`` back from the Job's termination message,
which Kubernetes caps at 4096 bytes. Both travel as JSON: ``to_json``/``from_json`` here are the
one format, and ``from_json`` rejects anything malformed with an ``InputError`` naming the input
and the field.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar

import pydantic

from gpuguard.errors import GpuguardError, InputError
from gpuguard.model import decisions, xid

SUMMARY_MAX_BYTES = 4000
"""Kubernetes truncates a container's termination message at 4096 bytes; keep a margin."""

FALLEN_OFF_BUS_KEY = "fallen_off_bus"
"""The key for fall-off messages (which carry no Xid number) in ``EvidenceSummary.xid_counts``."""

_STRICT = pydantic.ConfigDict(extra="forbid")


class VerdictRule(StrEnum):
    """Which rule of the verdict policy fired (``policy.verdict`` documents the order)."""

    CONFIG_SPACE_ALL_FF = "config-space-all-ff"
    FELL_OFF_BUS = "xid79-or-fallen-off-bus"
    DRIVER_REQUIRES_NODE_REBOOT = "reset-code-driver-requires-node-reboot"
    RESET_CODE_HEALTHY_CONFIG = "reset-code-healthy-config"
    RESET_CODE_CONFIG_UNCONFIRMED = "reset-code-config-unconfirmed"
    RMA_CODE = "xid143-rma"
    OTHER_CODES = "other-codes"
    NO_FAULT_EVIDENCE = "no-fault-evidence"
    KERNEL_LOG_UNREAD = "kernel-log-unread"


@dataclass(frozen=True, slots=True)
class EvidenceItem:
    """One thing read on the node: PASS / FAIL / UNKNOWN and what was actually read."""

    __pydantic_config__: ClassVar[pydantic.ConfigDict] = _STRICT

    item: str
    status: decisions.CheckStatus
    evidence: str
    gpu: str | None = None


@dataclass(frozen=True, slots=True)
class GpuFacts:
    """What sysfs says about one NVIDIA GPU function (None: could not be read).

    ``present`` is False for a GPU the kernel log names but sysfs no longer lists.
    ``config_all_ff`` is True when its PCI config space reads all ones (the device does not
    answer on the bus). ``root_port`` is the PCI bridge right below the host bridge above it.
    """

    __pydantic_config__: ClassVar[pydantic.ConfigDict] = _STRICT

    pci: str
    present: bool = True
    uuid: str | None = None
    config_all_ff: bool | None = None
    link_width: int | None = None
    max_link_width: int | None = None
    link_speed_gts: float | None = None
    max_link_speed_gts: float | None = None
    root_port: str | None = None


@dataclass(frozen=True, slots=True)
class AerCounters:
    """A root port's AER totals (None: file absent or malformed) and its non-zero counters."""

    __pydantic_config__: ClassVar[pydantic.ConfigDict] = _STRICT

    port: str
    correctable: int | None = None
    nonfatal: int | None = None
    fatal: int | None = None
    rootport_correctable: int | None = None
    rootport_nonfatal: int | None = None
    rootport_fatal: int | None = None
    nonzero: tuple[str, ...] = ()

    @property
    def uncorrectable(self) -> int:
        """Fatal plus non-fatal errors, as the port saw them and as reported to it."""
        counts = (self.fatal, self.nonfatal, self.rootport_fatal, self.rootport_nonfatal)
        return sum(count or 0 for count in counts)


@dataclass(frozen=True, slots=True)
class KernelLogRead:
    """Where the Xid events came from, how much was read, and every event counted.

    ``event_counts`` counts all events of the window by ``event_key``; the bundle's
    ``xid_events`` may keep only the latest few of each (code, GPU) on a log flooded with one
    code (``events_dropped`` of them were not kept), so counts are read here.
    """

    __pydantic_config__: ClassVar[pydantic.ConfigDict] = _STRICT

    source: str
    since: str
    lines_read: int = 0
    malformed_lines: int = 0
    event_counts: Mapping[str, int] = field(default_factory=dict)
    events_dropped: int = 0


@dataclass(frozen=True, slots=True)
class NvidiaSmiRun:
    """Whether ``nvidia-smi -q`` ran, why not, and its (bounded) output."""

    __pydantic_config__: ClassVar[pydantic.ConfigDict] = _STRICT

    ran: bool
    reason: str
    returncode: int | None = None
    output: str = ""


@dataclass(frozen=True, slots=True)
class VerdictDecision:
    """The repair a node needs, the rule that decided it and the evidence it rests on.

    ``driver_advice`` is the driver's last Xid 154 recovery action, shown to humans; it may
    escalate a verdict but never override config-space evidence.
    """

    __pydantic_config__: ClassVar[pydantic.ConfigDict] = _STRICT

    verdict: decisions.Verdict
    rule: VerdictRule
    evidence: tuple[decisions.Evidence, ...] = ()
    driver_advice: str | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class EvidenceBundle:
    """Everything one evidence run read on one node, plus the verdict computed from it."""

    __pydantic_config__: ClassVar[pydantic.ConfigDict] = _STRICT

    node: str
    collected_at: datetime
    boot_id: str | None
    items: tuple[EvidenceItem, ...] = ()
    xid_events: tuple[xid.KernelEvent, ...] = ()
    gpus: tuple[GpuFacts, ...] = ()
    root_ports: tuple[AerCounters, ...] = ()
    kernel_log: KernelLogRead | None = None
    nvidia_smi: NvidiaSmiRun | None = None
    verdict: VerdictDecision | None = None

    def to_json(self) -> str:
        return _BUNDLE.dump_json(self, indent=2).decode()

    @staticmethod
    def from_json(text: str | bytes, *, source: str = "evidence bundle") -> EvidenceBundle:
        """Parse a bundle; InputError naming ``source`` and the bad field when malformed."""
        bundle: EvidenceBundle = _validate(_BUNDLE, text, source)
        return bundle

    def summary(self) -> EvidenceSummary:
        return EvidenceSummary.from_bundle(self)


@dataclass(frozen=True, slots=True)
class EvidenceSummary:
    """The compact form of a bundle: the Job's termination message, read by the controller.

    ``xid_counts`` maps a code (as text) or ``fallen_off_bus`` to how often it was seen;
    ``aer_fatal`` maps a root port to its fatal total (None: unreadable). ``truncated`` is True
    when ``to_json`` shed optional detail to stay under ``SUMMARY_MAX_BYTES``.
    """

    __pydantic_config__: ClassVar[pydantic.ConfigDict] = _STRICT

    node: str
    boot_id: str | None
    collected_at: datetime
    verdict: decisions.Verdict | None
    rule: VerdictRule | None
    driver_advice: str | None = None
    config_all_ff: Mapping[str, bool | None] = field(default_factory=dict)
    xid_counts: Mapping[str, int] = field(default_factory=dict)
    last_xid154_action: xid.RecoveryAction | None = None
    aer_fatal: Mapping[str, int | None] = field(default_factory=dict)
    evidence: tuple[str, ...] = ()
    truncated: bool = False

    @staticmethod
    def from_bundle(bundle: EvidenceBundle) -> EvidenceSummary:
        decision = bundle.verdict
        return EvidenceSummary(
            node=bundle.node,
            boot_id=bundle.boot_id,
            collected_at=bundle.collected_at,
            verdict=decision.verdict if decision else None,
            rule=decision.rule if decision else None,
            driver_advice=decision.driver_advice if decision else None,
            config_all_ff={gpu.pci: gpu.config_all_ff for gpu in bundle.gpus},
            xid_counts=_xid_counts(bundle),
            last_xid154_action=_last_recovery_action(bundle.xid_events),
            aer_fatal={port.port: port.fatal for port in bundle.root_ports},
            evidence=tuple(_describe(e) for e in decision.evidence) if decision else (),
        )

    def to_json(self, max_bytes: int = SUMMARY_MAX_BYTES) -> str:
        """Compact JSON of at most ``max_bytes`` UTF-8 bytes.

        When too long it sheds, in order and marking ``truncated``: evidence lines (the full
        bundle keeps them), then root ports with no fatal error, then GPUs whose config space
        reads healthy. Ports with errors, GPUs reading ff or unknown and the counts always stay.
        """
        summary = self
        text = summary._compact()
        for shed in _SHEDDING:
            while len(text.encode()) > max_bytes and (smaller := shed(summary)) is not None:
                summary = replace(smaller, truncated=True)
                text = summary._compact()
        if len(text.encode()) > max_bytes:
            raise GpuguardError(
                f"evidence summary of {summary.node} is {len(text.encode())} bytes after "
                f"shedding everything optional (limit {max_bytes})"
            )
        return text

    def _compact(self) -> str:
        return _SUMMARY.dump_json(self).decode()

    @staticmethod
    def from_json(text: str | bytes, *, source: str = "evidence summary") -> EvidenceSummary:
        """Parse a summary; InputError naming ``source`` and the bad field when malformed."""
        summary: EvidenceSummary = _validate(_SUMMARY, text, source)
        return summary


def _without_last_evidence(summary: EvidenceSummary) -> EvidenceSummary | None:
    return replace(summary, evidence=summary.evidence[:-1]) if summary.evidence else None


def _without_quiet_ports(summary: EvidenceSummary) -> EvidenceSummary | None:
    loud = {port: fatal for port, fatal in summary.aer_fatal.items() if fatal != 0}
    return replace(summary, aer_fatal=loud) if len(loud) < len(summary.aer_fatal) else None


def _without_healthy_gpus(summary: EvidenceSummary) -> EvidenceSummary | None:
    flagged = {gpu: ff for gpu, ff in summary.config_all_ff.items() if ff is not False}
    return (
        replace(summary, config_all_ff=flagged)
        if len(flagged) < len(summary.config_all_ff)
        else None
    )


_SHEDDING = (_without_last_evidence, _without_quiet_ports, _without_healthy_gpus)


def _describe(fact: decisions.Evidence) -> str:
    labels = ", ".join(f"{key}={value}" for key, value in fact.labels.items())
    return fact.describe() + (f" [{labels}]" if labels else "")


def event_key(event: xid.KernelEvent) -> str:
    """How an event is counted: its Xid code as text, or ``fallen_off_bus``."""
    if event.kind is xid.KernelEventKind.FALLEN_OFF_BUS:
        return FALLEN_OFF_BUS_KEY
    return str(event.xid)


def count_events(events: Iterable[xid.KernelEvent]) -> dict[str, int]:
    return dict(sorted(Counter(event_key(event) for event in events).items()))


def _xid_counts(bundle: EvidenceBundle) -> dict[str, int]:
    if bundle.kernel_log is not None and bundle.kernel_log.event_counts:
        return dict(bundle.kernel_log.event_counts)
    return count_events(bundle.xid_events)


def _last_recovery_action(events: tuple[xid.KernelEvent, ...]) -> xid.RecoveryAction | None:
    actions = [event.recovery_action for event in events if event.recovery_action is not None]
    return actions[-1] if actions else None


def _validate(adapter: pydantic.TypeAdapter[Any], text: str | bytes, source: str) -> Any:
    try:
        return adapter.validate_json(text)
    except pydantic.ValidationError as e:
        problem = e.errors()[0]
        where = ".".join(str(part) for part in problem["loc"]) or "(top level)"
        raise InputError(f"{source}: {where}: {problem['msg']}") from e


_BUNDLE: pydantic.TypeAdapter[EvidenceBundle] = pydantic.TypeAdapter(EvidenceBundle)
_SUMMARY: pydantic.TypeAdapter[EvidenceSummary] = pydantic.TypeAdapter(EvidenceSummary)
