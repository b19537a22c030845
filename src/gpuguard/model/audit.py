"""What ``gpuguard audit`` reads and reports (docs/audit.md).

``AuditView`` is one immutable picture of a live cluster: Kubernetes objects as the API returns
them (plain JSON, by ``Input``), the API server's version, and named Prometheus answers. What
could not be read is named in ``missing`` with the reason, so a rule that needs it says "not
checked (why)" instead of passing. ``sources.audit`` builds the view; ``policy.audit`` judges it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from gpuguard.model import fleet, workloads
from gpuguard.model import settings as settings_model

Obj = Mapping[str, Any]


class Input(StrEnum):
    """One thing the audit reads; a rule names the inputs it needs."""

    NODES = "nodes"
    PODS = "pods"  # every pod, finished ones included (their admission errors are evidence)
    DAEMONSETS = "daemonsets"
    JOBS = "jobs"
    DEPLOYMENTS = "deployments"
    PDBS = "poddisruptionbudgets"
    CONFIGMAPS = "configmaps"  # kube-system's only (kube-proxy, CoreDNS)
    EVENTS = "events"
    NODECLAIMS = "nodeclaims"  # karpenter.sh; empty when Karpenter is not installed
    CLUSTER_POLICIES = "clusterpolicies"  # nvidia.com (GPU Operator); empty when not installed
    RAYJOBS = "rayjobs"  # ray.io; empty when KubeRay is not installed
    API_VERSION = "api-server-version"
    PROM_RULES = "prometheus-rules"  # Prometheus' loaded rules (GET /api/v1/rules)
    PROM_SERIES = "prometheus-series"  # which metric names Prometheus has now
    PROM_CORDON_72H = "prometheus-cordoned-72h"  # nodes unschedulable for the whole last 72 h
    PROM_DCGM_NODES = "prometheus-dcgm-nodes"  # nodes with dcgm-exporter series now
    PROM_FLEET_HEALTH = "prometheus-fleet-health"  # throttling, link errors, GPU topology


class Severity(StrEnum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"
    INFO = "info"

    @property
    def rank(self) -> int:
        """Higher is worse: high 3 ... info 0."""
        return len(SEVERITIES) - 1 - SEVERITIES.index(self)


SEVERITIES = (Severity.HIGH, Severity.MEDIUM, Severity.LOW, Severity.INFO)


@dataclass(frozen=True, slots=True)
class PromRule:
    """One alerting or recording rule Prometheus has loaded."""

    group: str
    name: str
    expr: str


@dataclass(frozen=True, slots=True)
class AuditView:
    at: datetime
    objects: Mapping[Input, tuple[Obj, ...]] = field(default_factory=dict)
    api_server_version: str | None = None
    prom_rules: tuple[PromRule, ...] = ()
    prom_series: frozenset[str] = frozenset()  # metric names present now
    prom_nodes: Mapping[Input, frozenset[str]] = field(default_factory=dict)
    missing: Mapping[Input, str] = field(default_factory=dict)  # input -> why it is unread
    hygiene: settings_model.HygieneSettings = field(
        default_factory=settings_model.HygieneSettings
    )  # the hygiene review's thresholds, shared by the rules built on it
    fleet_settings: settings_model.FleetHealthSettings = field(
        default_factory=settings_model.FleetHealthSettings
    )  # the fleet-health detectors' thresholds (docs/fleet-health.md)
    workload_pods: tuple[workloads.WorkloadPod, ...] = ()  # unfinished pods, for job grouping
    health_samples: tuple[fleet.MetricSample, ...] = ()  # the fleet-health plan's samples
    pod_gpus: Mapping[str, Mapping[str, tuple[int, ...]]] = field(default_factory=dict)

    def of(self, what: Input) -> tuple[Obj, ...]:
        return self.objects.get(what, ())


@dataclass(frozen=True, slots=True)
class AuditFinding:
    """One problem: which rule, how bad, on which objects, the evidence, the source, the fix."""

    rule: str
    severity: Severity
    objects: tuple[str, ...]
    evidence: str
    source: str
    fix: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": str(self.severity),
            "objects": list(self.objects),
            "evidence": self.evidence,
            "source": self.source,
            "fix": self.fix,
        }


class RuleStatus(StrEnum):
    FINDINGS = "findings"
    NO_FINDING = "no-finding"
    NOT_CHECKED = "not-checked"


@dataclass(frozen=True, slots=True)
class RuleResult:
    rule: str
    title: str
    status: RuleStatus
    findings: tuple[AuditFinding, ...] = ()
    why: str = ""  # for NOT_CHECKED: what was missing

    def as_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "title": self.title,
            "status": str(self.status),
            "why": self.why,
            "findings": [f.as_dict() for f in self.findings],
        }
