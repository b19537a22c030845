"""The onboarding gate (docs/design.md#host-conformance-and-onboarding): may a new node lose its
taint?

A node registers with ``gpuguard.io/onboarding=pending:NoSchedule``; the gate removes it only
when every step passes (WARN does not block). Any FAIL or UNKNOWN keeps the taint: missing
data never lets a node in. Steps:

- ``kubelet-version``: the kubelet is not newer than the API server and its minor is within
  ``max_minor_skew`` of it (0 by default: the lifecycle report's [docs/design.md#incidents] RKE2
  rule, minor differs → FAIL); a patch difference is a WARN. The report names where the API server's
  version came from (its ``/version``, the operator's flag, or the control-plane kubelet when
  ``/version`` failed).
- ``role-labels``: the node carries the ``node-role.kubernetes.io/*`` label the cluster's
  existing workers carry, with the same value (``worker=true`` vs ``worker=""`` selects
  differently). No existing worker to compare with → WARN.
- ``conformance``: the node agent's current check statuses (no rke2-server on a worker,
  NVIDIA module = NVML, ip_vs, DNS, ...). Not reported → UNKNOWN.
- ``smoke``: the GPU burn-in's result. None yet → UNKNOWN.

Pure: what was read in (``model.onboarding.GateView``, turned into ``GateFacts`` by
``facts_from``), report out; ``sources.onboarding`` reads, ``actuators.onboarding`` applies.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from gpuguard.model import annotation_keys, decisions, jobs, onboarding

Status = decisions.CheckStatus
ROLE_PREFIX = "node-role.kubernetes.io/"
CONTROL_PLANE_ROLES = frozenset({"control-plane", "master", "etcd"})
_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")
_PASSING = frozenset({Status.PASS, Status.WARN, Status.FIXED})
VERSION_ENDPOINT_SOURCE = "API server /version"
FLAG_SOURCE = "--api-server-version"


class Step(StrEnum):
    KUBELET_VERSION = "kubelet-version"
    ROLE_LABELS = "role-labels"
    CONFORMANCE = "conformance"
    SMOKE = "smoke"


@dataclass(frozen=True, slots=True)
class StepResult:
    step: Step
    status: decisions.CheckStatus
    evidence: str

    def as_dict(self) -> dict[str, str]:
        return {"step": str(self.step), "status": str(self.status), "evidence": self.evidence}


@dataclass(frozen=True, slots=True)
class GateFacts:
    """What the gate knows about the node and the cluster; None where it could not be read."""

    node: str
    kubelet_version: str | None
    api_server_version: str | None
    labels: Mapping[str, str]
    peer_labels: tuple[Mapping[str, str], ...]  # the cluster's other, onboarded nodes
    check_status: Mapping[str, decisions.CheckStatus] | None  # the agent's, by check name
    smoke: StepResult | None = None
    api_server_source: str = VERSION_ENDPOINT_SOURCE
    max_minor_skew: int = 0


@dataclass(frozen=True, slots=True)
class GateReport:
    node: str
    steps: tuple[StepResult, ...] = field(default_factory=tuple)
    api_server_version: str | None = None
    api_server_source: str = VERSION_ENDPOINT_SOURCE

    @property
    def passed(self) -> bool:
        return all(s.status in _PASSING for s in self.steps)

    def summary(self) -> str:
        verdict = "PASSED: taint removed" if self.passed else "NOT PASSED: taint kept"
        shown = ", ".join(f"{s.step}={s.status}" for s in self.steps)
        return f"onboarding gate {verdict} ({shown})"

    def as_dict(self) -> dict[str, object]:
        return {
            "node": self.node,
            "passed": self.passed,
            "steps": [s.as_dict() for s in self.steps],
            "api_server": {"version": self.api_server_version, "source": self.api_server_source},
        }


def decide(facts: GateFacts) -> GateReport:
    steps = (
        kubelet_version(facts),
        role_labels(facts.labels, facts.peer_labels),
        conformance(facts.check_status),
        facts.smoke or StepResult(Step.SMOKE, Status.UNKNOWN, "no burn-in result for this node"),
    )
    return GateReport(facts.node, steps, facts.api_server_version, facts.api_server_source)


def kubelet_version(facts: GateFacts) -> StepResult:
    step = Step.KUBELET_VERSION
    kubelet, server = parse_version(facts.kubelet_version), parse_version(facts.api_server_version)
    shown = (
        f"kubelet {facts.kubelet_version}, API server {facts.api_server_version} "
        f"(from {facts.api_server_source})"
    )
    if kubelet is None or server is None:
        return StepResult(step, Status.UNKNOWN, f"{shown}: unreadable or missing")
    if kubelet > server:
        return StepResult(step, Status.FAIL, f"{shown}: kubelet newer than the API server")
    if server[1] - kubelet[1] > facts.max_minor_skew or kubelet[0] != server[0]:
        allowed = f"minor skew {server[1] - kubelet[1]} > allowed {facts.max_minor_skew}"
        return StepResult(step, Status.FAIL, f"{shown}: {allowed}")
    if kubelet != server:
        return StepResult(step, Status.WARN, f"{shown}: versions differ within policy")
    return StepResult(step, Status.PASS, shown)


def role_labels(labels: Mapping[str, str], peers: tuple[Mapping[str, str], ...]) -> StepResult:
    step = Step.ROLE_LABELS
    workers = [_roles(p) for p in peers if not is_control_plane(p)]
    usual = Counter(pair for roles in workers for pair in roles.items()).most_common(1)
    own = _roles(labels)
    if not usual:
        return StepResult(step, Status.WARN, f"no onboarded worker to compare with; has {own}")
    (key, value), count = usual[0]
    expected = f"{key}={value!r} (on {count}/{len(workers)} workers)"
    if own.get(key) == value:
        return StepResult(step, Status.PASS, f"has {expected}")
    has = f"{key}={own[key]!r}" if key in own else f"no {key}"
    return StepResult(step, Status.FAIL, f"expected {expected}; node has {has}")


def conformance(statuses: Mapping[str, decisions.CheckStatus] | None) -> StepResult:
    step = Step.CONFORMANCE
    if not statuses:
        return StepResult(step, Status.UNKNOWN, "the node agent reports no check status")
    for status in (Status.FAIL, Status.UNKNOWN):
        names = sorted(name for name, s in statuses.items() if s is status)
        if names:
            return StepResult(step, status, f"{status}: {', '.join(names)}")
    warned = sorted(name for name, s in statuses.items() if s is Status.WARN)
    tail = f" (WARN: {', '.join(warned)})" if warned else ""
    return StepResult(step, Status.PASS, f"{len(statuses)} checks pass{tail}")


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    match = _VERSION.match(text or "")
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def _roles(labels: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k.startswith(ROLE_PREFIX)}


def is_control_plane(labels: Mapping[str, str]) -> bool:
    return any(key.removeprefix(ROLE_PREFIX) in CONTROL_PLANE_ROLES for key in _roles(labels))


# ---- from what was read to the facts ----------------------------------------------------------


def facts_from(
    view: onboarding.GateView, *, api_version: str | None, max_minor_skew: int, namespace: str
) -> GateFacts:
    """The gate's facts from what was read; ``api_version`` is the operator's, if given."""
    server, source = api_server(view, api_version)
    peers = tuple(n.labels for n in view.others if not n.onboarding)
    return GateFacts(
        node=view.node.name,
        kubelet_version=view.node.kubelet_version,
        api_server_version=server,
        api_server_source=source,
        labels=view.node.labels,
        peer_labels=peers,
        check_status=view.check_status,
        smoke=smoke(view.burnin_jobs, view.node.name, namespace),
        max_minor_skew=max_minor_skew,
    )


def api_server(view: onboarding.GateView, given: str | None) -> tuple[str | None, str]:
    """The API server's version and where it came from: the operator's flag, else its
    ``GET /version``, else (when that could not be read) the newest control-plane kubelet's —
    RKE2 servers run the kubelet and the API server from one release."""
    if given:
        return given, FLAG_SOURCE
    if view.api_server_version:
        return view.api_server_version, VERSION_ENDPOINT_SOURCE
    unreadable = view.version_unreadable or "GET /version not read"
    planes = [
        n for n in (view.node, *view.others) if is_control_plane(n.labels) and n.kubelet_version
    ]
    if not planes:
        return None, f"no control-plane node to fall back to; {unreadable}"
    newest = max(planes, key=lambda n: parse_version(n.kubelet_version) or (0, 0, 0))
    return newest.kubelet_version, f"control-plane {newest.name} kubelet; {unreadable}"


def smoke(burnin_jobs: tuple[onboarding.BurninJob, ...], node: str, namespace: str) -> StepResult:
    """The newest burn-in Job labelled for the node decides the smoke step."""
    if not burnin_jobs:
        label = annotation_keys.BURNIN_NODE_LABEL
        return StepResult(
            Step.SMOKE, Status.UNKNOWN, f"no burn-in Job labelled {label}={node} in {namespace}"
        )
    job = max(burnin_jobs, key=lambda j: j.created)
    status, said = _JOB_OUTCOME.get(job.state, (Status.UNKNOWN, "not done"))
    return StepResult(Step.SMOKE, status, f"Job {job.name} {said}")


_JOB_OUTCOME = {
    jobs.JobState.SUCCEEDED: (Status.PASS, "succeeded"),
    jobs.JobState.FAILED: (Status.FAIL, "failed"),
}
