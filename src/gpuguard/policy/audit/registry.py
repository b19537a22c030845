"""The rule type and the one runner: inputs checked first, hits turned into findings."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpuguard.model.audit import (
    AuditFinding,
    AuditView,
    Input,
    RuleResult,
    RuleStatus,
    Severity,
)


@dataclass(frozen=True, slots=True)
class Hit:
    """What a check found: how bad, on which objects, and the evidence (``fix`` overrides the
    rule's general fix when the objects call for a specific one)."""

    severity: Severity
    objects: tuple[str, ...]
    evidence: str
    fix: str = ""


@dataclass(frozen=True, slots=True)
class NotChecked:
    """A check that could not judge with what it was given, and why."""

    why: str


Check = Callable[[AuditView], "Iterable[Hit] | NotChecked"]


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    title: str
    needs: tuple[Input, ...]
    check: Check
    source: str
    fix: str


def run(view: AuditView, rules: Iterable[Rule]) -> tuple[RuleResult, ...]:
    """Every rule's result on ``view``, in the order given."""
    return tuple(run_one(view, rule) for rule in rules)


def run_one(view: AuditView, rule: Rule) -> RuleResult:
    missing = [f"{need}: {view.missing[need]}" for need in rule.needs if need in view.missing]
    if missing:
        return RuleResult(rule.id, rule.title, RuleStatus.NOT_CHECKED, why="; ".join(missing))
    outcome = rule.check(view)
    if isinstance(outcome, NotChecked):
        return RuleResult(rule.id, rule.title, RuleStatus.NOT_CHECKED, why=outcome.why)
    findings = tuple(
        AuditFinding(rule.id, h.severity, h.objects, h.evidence, rule.source, h.fix or rule.fix)
        for h in outcome
    )
    status = RuleStatus.FINDINGS if findings else RuleStatus.NO_FINDING
    return RuleResult(rule.id, rule.title, status, findings)
