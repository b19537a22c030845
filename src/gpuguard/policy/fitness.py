"""Is this node fit to run training? Yes or no, with the reasons
(docs/audit.md#health-verdict).

From everything gpuguard knows about the node: its lifecycle state, what the guard decides
about it now, a fault the breaker withheld, isolated or missing GPUs, the node agent's
conformance checks, and its last burn-in. Each is one check (PASS, WARN, FAIL or
UNKNOWN); the node is fit only when none is FAIL or UNKNOWN — what could not be read is never
a yes (Imbue's "is this host fit to train" check: https://imbue.com/research/70b-infrastructure/).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from gpuguard.catalog import dcgm_fields
from gpuguard.model import (
    decisions,
    fleet,
    gpu_isolation,
    jobs,
    onboarding,
    timestamps,
)
from gpuguard.model.decisions import CheckStatus
from gpuguard.policy import gate, interconnect, lifecycle

_FIT = (CheckStatus.PASS, CheckStatus.WARN)


@dataclass(frozen=True, slots=True)
class FitnessFacts:
    node: fleet.Node
    at: datetime
    guard: tuple[str, ...]  # the guard's actions and findings on this node now (dry run)
    guard_error: str | None  # why the guard could not decide, if it could not
    check_status: Mapping[str, CheckStatus]  # the node agent's conformance checks
    burnin_jobs: tuple[onboarding.BurninJob, ...]
    links: tuple[str, ...] = ()  # throttling and interconnect problems on the node now
    links_unread: str | None = None  # why they could not be read (a WARN, not a pass)
    dcgm_series: frozenset[str] | None = None  # DCGM series Prometheus has; None: not read
    malformed_times: tuple[str, ...] = ()  # node_conditions.malformed_times of its conditions


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: CheckStatus
    detail: str

    def as_dict(self) -> dict[str, str]:
        return {"check": self.name, "status": str(self.status), "detail": self.detail}


@dataclass(frozen=True, slots=True)
class FitnessVerdict:
    node: str
    checks: tuple[Check, ...]

    @property
    def fit(self) -> bool:
        return all(c.status in _FIT for c in self.checks)

    def reasons(self) -> list[str]:
        return [f"{c.name}: {c.detail}" for c in self.checks if c.status not in _FIT]


def guard_said(
    actions: Iterable[decisions.Action], findings: Iterable[decisions.Finding], node: str
) -> tuple[str, ...]:
    """What the guard decides or reports about ``node`` now, one line each."""
    said = [(str(a.kind), a.reason, a.detail) for a in actions if a.node == node]
    said += [("finding", f.reason, f.detail) for f in findings if f.node == node]
    return tuple(f"{kind} {reason}" + (f": {detail}" if detail else "")
                 for kind, reason, detail in said)


def verdict(facts: FitnessFacts, *, require_conformance: bool) -> FitnessVerdict:
    """``require_conformance``: a node without the agent's checks is not fit (else WARN),
    as ``return_to_pool.require_conformance`` says for the return to pool."""
    checks = (
        state(facts.node),
        guard(facts.guard, facts.guard_error),
        withheld_fault(facts.node),
        gpus(facts.node),
        conformance(facts.check_status, require=require_conformance),
        burnin(facts.burnin_jobs, facts.at),
        links(facts.links, facts.links_unread),
        telemetry(facts.dcgm_series),
        condition_times(facts.malformed_times),
    )
    return FitnessVerdict(facts.node.name, checks)


def condition_times(malformed: tuple[str, ...]) -> Check:
    """WARN naming each condition whose time is not one (``node_conditions.malformed_times``):
    its time is unknown to gpuguard (a GPU condition's fault time is lost), no fault of the
    node's GPUs."""
    if not malformed:
        return Check("conditions", CheckStatus.PASS, "every condition time is a time")
    return Check("conditions", CheckStatus.WARN,
                 "time not RFC 3339 (read as unknown): " + "; ".join(malformed))


def telemetry(present: frozenset[str] | None) -> Check:
    """WARN naming each DCGM field gpuguard reads that is not collected, and what goes blind
    (``catalog.dcgm_fields``); never a FAIL: a blind check is no fault of the node."""
    if present is None:
        return Check("telemetry", CheckStatus.WARN, "which DCGM fields are collected: unread")
    if not any(name.startswith("DCGM_") for name in present):
        return Check("telemetry", CheckStatus.WARN, "no dcgm-exporter series in Prometheus")
    missing = dcgm_fields.not_collected(present)
    if not missing:
        return Check("telemetry", CheckStatus.PASS, "every DCGM field gpuguard reads is collected")
    shown = "; ".join(f"{f.name} (blind: {f.blind})" for f in missing)
    return Check("telemetry", CheckStatus.WARN, f"{len(missing)} not collected: {shown}")


def state(node: fleet.Node) -> Check:
    found = lifecycle.state_of(node)
    ok = found is lifecycle.LifecycleState.SERVING
    return Check("state", CheckStatus.PASS if ok else CheckStatus.FAIL, str(found))


def guard(said: tuple[str, ...], error: str | None) -> Check:
    if error is not None:
        return Check("guard", CheckStatus.UNKNOWN, f"the guard could not decide: {error}")
    if said:
        return Check("guard", CheckStatus.FAIL, "; ".join(said))
    return Check("guard", CheckStatus.PASS, "no fault, action or finding on this node now")


def withheld_fault(node: fleet.Node) -> Check:
    mark = node.marks.withheld
    if mark is None:
        return Check("withheld", CheckStatus.PASS, "no fault withheld by the breaker")
    since = timestamps.format_utc(mark.since)
    return Check("withheld", CheckStatus.FAIL,
                 f"{mark.fault} withheld ({mark.reason}) since {since}, not yet isolated")


def gpus(node: fleet.Node) -> Check:
    isolated = node.marks.gpus
    problems = [f"GPU {e.index or e.uuid} isolated ({e.fault})" for e in isolated]
    if missing := gpu_isolation.unexplained_missing(node):
        problems.append(f"{missing} GPU(s) missing (capacity {node.gpu_capacity} > "
                        f"allocatable {node.gpu_allocatable})")
    if node.gpu_capacity == 0:
        problems.append("no GPU advertised")
    if problems:
        return Check("gpus", CheckStatus.FAIL, "; ".join(problems))
    shown = f"{node.gpu_allocatable}/{node.gpu_capacity} allocatable"
    return Check("gpus", CheckStatus.PASS, shown)


def conformance(statuses: Mapping[str, CheckStatus], *, require: bool) -> Check:
    step = gate.conformance(statuses)
    if not statuses and not require:
        return Check("conformance", CheckStatus.WARN, f"{step.evidence} (not required)")
    return Check("conformance", step.status, step.evidence)


def link_problems(
    node: str,
    findings: Iterable[decisions.Finding],
    persistent: Iterable[interconnect.NodeHealth],
) -> tuple[str, ...]:
    """The node's throttling and interconnect findings (``policy.interconnect``) and why it
    throttles or flaps persistently, one line each."""
    now = [f"{f.kind}: {f.detail}" for f in findings
           if f.node == node and f.kind in interconnect.KINDS]
    return (*now, *(f"persistent: {why}" for h in persistent if h.node == node
                    for why in h.reasons))


def links(problems: tuple[str, ...], unread: str | None) -> Check:
    if problems:
        return Check("interconnect", CheckStatus.FAIL, "; ".join(problems))
    if unread is not None:
        return Check("interconnect", CheckStatus.WARN, f"not read: {unread}")
    return Check("interconnect", CheckStatus.PASS, "no throttling, NVLink, PCIe or InfiniBand "
                 "errors")


def burnin(found: tuple[onboarding.BurninJob, ...], at: datetime) -> Check:
    """The newest burn-in Job: failed or still running is not fit; none on record is a WARN
    (gpuguard's burn-in Jobs have ttlSecondsAfterFinished: 7 days)."""
    dated = [(t, j) for j in found if (t := timestamps.parse_utc(j.created)) is not None]
    if not dated:
        return Check("burn-in", CheckStatus.WARN, "no burn-in Job on record for this node")
    created, last = max(dated, key=lambda pair: pair[0])
    shown = f"{last.name} {last.state}, started {(at - created).days} day(s) ago"
    if last.state is jobs.JobState.SUCCEEDED:
        return Check("burn-in", CheckStatus.PASS, shown)
    return Check("burn-in", CheckStatus.FAIL, shown + (
        "" if last.state is jobs.JobState.FAILED else ": the node is under test"))
