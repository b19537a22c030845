"""The onboarding gate's decision: only a node that passes every step loses its taint."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import pytest

from gpuguard.model import onboarding
from gpuguard.model.decisions import CheckStatus
from gpuguard.model.jobs import JobState
from gpuguard.policy import gate

WORKER = {"node-role.kubernetes.io/worker": "true", "nvidia.com/gpu.present": "true"}
CONTROL_PLANE = {"node-role.kubernetes.io/control-plane": "true"}
ALL_PASS = dict.fromkeys(("ipvs-loaded", "nvidia-match", "rke2-unit", "rke2-version"),
                         CheckStatus.PASS)
SMOKE_OK = gate.StepResult(gate.Step.SMOKE, CheckStatus.PASS, "Job burnin-1 succeeded")
GOOD = gate.GateFacts(
    node="gpu-node-new",
    kubelet_version="v1.34.3+rke2r1",
    api_server_version="v1.34.3+rke2r1",
    labels=WORKER,
    peer_labels=(WORKER, WORKER, CONTROL_PLANE),
    check_status=ALL_PASS,
    smoke=SMOKE_OK,
)


def with_checks(**statuses: CheckStatus) -> Mapping[str, CheckStatus]:
    return {**ALL_PASS, **{k.replace("_", "-"): v for k, v in statuses.items()}}


CASES = [
    pytest.param({}, None, id="conformant-node-passes"),
    pytest.param({"kubelet_version": "v1.35.7+rke2r1"}, (gate.Step.KUBELET_VERSION, "FAIL"),
                 id="aug7-kubelet-1.35-against-1.34-control-plane"),
    pytest.param({"kubelet_version": "v1.33.5+rke2r1"}, (gate.Step.KUBELET_VERSION, "FAIL"),
                 id="kubelet-minor-behind-outside-policy"),
    pytest.param({"kubelet_version": "v1.34.1+rke2r1"}, (gate.Step.KUBELET_VERSION, "WARN"),
                 id="patch-behind-warns-and-passes"),
    pytest.param({"kubelet_version": None}, (gate.Step.KUBELET_VERSION, "UNKNOWN"),
                 id="no-kubelet-version-keeps-taint"),
    pytest.param({"labels": {"node-role.kubernetes.io/worker": ""}},
                 (gate.Step.ROLE_LABELS, "FAIL"), id="worker-label-empty-value-not-cluster-format"),
    pytest.param({"labels": {}}, (gate.Step.ROLE_LABELS, "FAIL"), id="no-role-label"),
    pytest.param({"peer_labels": (CONTROL_PLANE,)}, (gate.Step.ROLE_LABELS, "WARN"),
                 id="first-worker-nothing-to-compare"),
    pytest.param({"check_status": with_checks(rke2_unit=CheckStatus.FAIL)},
                 (gate.Step.CONFORMANCE, "FAIL"), id="aug7-rke2-server-enabled-on-worker"),
    pytest.param({"check_status": with_checks(nvidia_match=CheckStatus.UNKNOWN)},
                 (gate.Step.CONFORMANCE, "UNKNOWN"), id="check-unknown-keeps-taint"),
    pytest.param({"check_status": None}, (gate.Step.CONFORMANCE, "UNKNOWN"),
                 id="agent-not-reporting-keeps-taint"),
    pytest.param({"smoke": None}, (gate.Step.SMOKE, "UNKNOWN"), id="no-burnin-keeps-taint"),
    pytest.param({"smoke": dataclasses.replace(SMOKE_OK, status=CheckStatus.FAIL)},
                 (gate.Step.SMOKE, "FAIL"), id="burnin-failed"),
]


@pytest.mark.parametrize(("change", "expected"), CASES)
def test_gate_passes_only_when_no_step_fails_or_is_unknown(
    change: dict[str, object], expected: tuple[gate.Step, str] | None
) -> None:
    report = gate.decide(dataclasses.replace(GOOD, **change))  # type: ignore[arg-type]
    by_step = {s.step: str(s.status) for s in report.steps}
    if expected is None:
        assert set(by_step.values()) == {"PASS"}
        assert report.passed
        return
    step, status = expected
    assert by_step[step] == status
    others = {k: v for k, v in by_step.items() if k is not step}
    assert set(others.values()) == {"PASS"}
    assert report.passed is (status == "WARN")
    assert ("taint removed" in report.summary()) is report.passed


def test_minor_skew_policy_can_allow_an_older_kubelet() -> None:
    facts = dataclasses.replace(GOOD, kubelet_version="v1.33.5+rke2r1", max_minor_skew=1)
    assert gate.kubelet_version(facts).status is CheckStatus.WARN


def test_report_names_what_failed_for_the_annotation() -> None:
    facts = dataclasses.replace(GOOD, check_status=with_checks(rke2_unit=CheckStatus.FAIL))
    report = gate.decide(facts).as_dict()
    assert report["passed"] is False
    steps = report["steps"]
    assert isinstance(steps, list)
    assert {"step": "conformance", "status": "FAIL", "evidence": "FAIL: rke2-unit"} in steps


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(gate.VERSION_ENDPOINT_SOURCE, id="api-server-version-endpoint"),
        pytest.param("--api-server-version", id="operator-flag"),
        pytest.param("control-plane cp-1 kubelet; GET /version answered 403: forbidden",
                     id="version-forbidden-control-plane-fallback"),
    ],
)
def test_report_says_where_the_api_server_version_came_from(source: str) -> None:
    facts = dataclasses.replace(GOOD, kubelet_version="v1.35.7+rke2r1", api_server_source=source)
    report = gate.decide(facts)
    assert report.as_dict()["api_server"] == {"version": "v1.34.3+rke2r1", "source": source}
    [step] = [s for s in report.steps if s.step is gate.Step.KUBELET_VERSION]
    assert step.status is CheckStatus.FAIL
    assert f"API server v1.34.3+rke2r1 (from {source})" in step.evidence


# ---- from what was read to the facts ----------------------------------------------------------

ONBOARDING_TAINT = {"key": "gpuguard.io/onboarding", "value": "pending", "effect": "NoSchedule"}
NEW = onboarding.GateNode(
    "gpu-node-new", "7", "v1.34.3+rke2r1", WORKER, (ONBOARDING_TAINT,)
)


def view(**changes: object) -> onboarding.GateView:
    base = onboarding.GateView(
        node=NEW,
        others=(
            onboarding.GateNode("cp-1", kubelet_version="v1.34.1+rke2r1", labels=CONTROL_PLANE),
            onboarding.GateNode("cp-2", kubelet_version="v1.34.3+rke2r1", labels=CONTROL_PLANE),
            onboarding.GateNode("gpu-1", kubelet_version="v1.34.3+rke2r1", labels=WORKER),
            onboarding.GateNode("gpu-2", labels={"odd": "x"}, taints=(ONBOARDING_TAINT,)),
        ),
        burnin_jobs=(),
        check_status=ALL_PASS,
        api_server_version="v1.34.3+rke2r1",
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def facts(v: onboarding.GateView, api_version: str | None = None) -> gate.GateFacts:
    return gate.facts_from(v, api_version=api_version, max_minor_skew=0, namespace="gpuguard")


def test_peers_are_the_other_onboarded_nodes() -> None:
    assert facts(view()).peer_labels == (CONTROL_PLANE, CONTROL_PLANE, WORKER)


@pytest.mark.parametrize(
    ("changes", "flag", "expected"),
    [
        pytest.param({}, "v1.33.0", ("v1.33.0", gate.FLAG_SOURCE), id="flag-first"),
        pytest.param({}, None, ("v1.34.3+rke2r1", gate.VERSION_ENDPOINT_SOURCE), id="version"),
        pytest.param(
            {"api_server_version": None, "version_unreadable": "GET /version failed: 403"},
            None,
            ("v1.34.3+rke2r1", "control-plane cp-2 kubelet; GET /version failed: 403"),
            id="newest-control-plane",
        ),
        pytest.param(
            {"api_server_version": None, "version_unreadable": "refused", "others": ()},
            None,
            (None, "no control-plane node to fall back to; refused"),
            id="nothing-to-fall-back-to",
        ),
    ],
)
def test_the_api_server_version_and_where_it_came_from(
    changes: dict[str, object], flag: str | None, expected: tuple[str | None, str]
) -> None:
    found = facts(view(**changes), flag)
    assert (found.api_server_version, found.api_server_source) == expected


@pytest.mark.parametrize(
    ("burnin_jobs", "expected"),
    [
        pytest.param((), CheckStatus.UNKNOWN, id="none"),
        pytest.param(
            (
                onboarding.BurninJob("burnin-1", "2026-09-01T10:00:00+00:00", JobState.FAILED),
                onboarding.BurninJob("burnin-2", "2026-09-02T10:00:00+00:00", JobState.SUCCEEDED),
            ),
            CheckStatus.PASS,
            id="the-newest-decides",
        ),
        pytest.param(
            (onboarding.BurninJob("burnin-3", "2026-09-03T10:00:00+00:00", JobState.RUNNING),),
            CheckStatus.UNKNOWN,
            id="running",
        ),
        pytest.param(
            (onboarding.BurninJob("burnin-4", "2026-09-03T10:00:00+00:00", JobState.FAILED),),
            CheckStatus.FAIL,
            id="failed",
        ),
    ],
)
def test_the_newest_burnin_job_is_the_smoke_step(
    burnin_jobs: tuple[onboarding.BurninJob, ...], expected: CheckStatus
) -> None:
    smoke = facts(view(burnin_jobs=burnin_jobs)).smoke
    assert smoke is not None
    assert smoke.status is expected
