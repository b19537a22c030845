"""The guard's /metrics show ticks, errors, decisions, breaker and isolated nodes."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gpuguard.controller import change as change_step
from gpuguard.controller import gpu_isolation as gpu_step
from gpuguard.controller import remediation as remediation_step
from gpuguard.controller import telemetry, tick
from gpuguard.model import annotation_keys, change, fleet, gpu_isolation, settings
from gpuguard.model import remediation as remediation_model
from gpuguard.policy import admission, isolate, rollout
from gpuguard.policy import remediation as remediation_policy

NOW = datetime(2026, 9, 21, 5, 53, 30, tzinfo=UTC)


def values(metrics: telemetry.GuardMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.exposition().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_a_failed_tick_counts_an_error_and_keeps_the_last_success() -> None:
    metrics = telemetry.GuardMetrics()
    metrics.observe(tick.TickResult(at=NOW, error="503", error_kind="source"))
    seen = values(metrics)
    assert seen[("gpuguard_ticks_total", ())] == 1
    assert seen[("gpuguard_tick_errors_total", (("kind", "source"), ("step", "collect")))] == 1
    assert seen[("gpuguard_last_successful_tick_timestamp_seconds", ())] == 0


def test_breaker_and_isolated_nodes_are_exported() -> None:
    isolated = fleet.Node(
        "gpu-node-b",
        "b",
        8,
        7,
        unschedulable=True,
        annotations={annotation_keys.ISOLATED_AT: "x", annotation_keys.REASON: "xid-79"},
    )
    state = admission.admit(
        [],
        admission.history([isolated]),
        None,
        2,
        settings.IsolationSettings(breaker_rate_min=1, breaker_level_min=1),
        NOW,
    ).state
    result = tick.TickResult(
        at=NOW,
        decision=isolate.IsolationDecision((), (), state),
        snapshot=fleet.FleetSnapshot(NOW, nodes=(isolated,)),
    )
    metrics = telemetry.GuardMetrics()
    metrics.observe(result)
    seen = values(metrics)
    assert seen[("gpuguard_breaker_open", ())] == 1
    key = ("gpuguard_isolated_nodes", (("node", "gpu-node-b"), ("reason", "xid-79")))
    assert seen[key] == 1
    assert seen[("gpuguard_last_successful_tick_timestamp_seconds", ())] == NOW.timestamp()


def test_endpoint_serves_metrics_liveness_and_readiness_apart() -> None:
    metrics = telemetry.GuardMetrics()
    health = {"ok": True, "ready": True}
    with telemetry.serve(
        metrics, lambda: health["ok"], host="127.0.0.1", ready=lambda: health["ready"]
    ) as server:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        with httpx.Client() as client:
            assert "gpuguard_ticks_total" in client.get(base + "/metrics").text
            assert client.get(base + "/healthz").status_code == 200
            health["ready"] = False  # Prometheus down: not ready, still alive
            assert client.get(base + "/readyz").status_code == 503
            assert client.get(base + "/healthz").status_code == 200
            health["ok"] = False
            assert client.get(base + "/healthz").status_code == 503


def test_a_replica_that_stops_leading_clears_the_fleet_gauges() -> None:
    isolated = fleet.Node(
        "gpu-node-b",
        "b",
        8,
        7,
        unschedulable=True,
        annotations={
            annotation_keys.ISOLATED_AT: "2026-09-21T05:00:00Z",
            annotation_keys.REASON: "xid-79",
        },
    )
    state = admission.admit(
        [], admission.history([isolated]), None, 1, settings.IsolationSettings(), NOW
    )
    metrics = telemetry.GuardMetrics()
    metrics.set_leading(True)
    metrics.observe(
        tick.TickResult(
            at=NOW,
            decision=isolate.IsolationDecision((), (), state.state),
            snapshot=fleet.FleetSnapshot(NOW, nodes=(isolated,)),
        )
    )
    assert values(metrics)[("gpuguard_auto_isolated_nodes", ())] == 1
    metrics.set_leading(False)
    seen = values(metrics)
    assert seen[("gpuguard_leader", ())] == 0
    assert seen[("gpuguard_auto_isolated_nodes", ())] == 0
    assert seen[("gpuguard_breaker_open", ())] == 0
    assert not [key for key in seen if key[0] == "gpuguard_isolated_nodes"]


def test_a_step_that_failed_closed_is_counted_by_step() -> None:
    metrics = telemetry.GuardMetrics()
    failed = [("recovery", "node gpu-node-a: ValueError: x"), ("recovery", "node b: KeyError")]
    metrics.observe(tick.TickResult(at=NOW, step_errors=failed))
    seen = values(metrics)
    assert seen[("gpuguard_tick_errors_total", (("kind", "internal"), ("step", "recovery")))] == 2


def test_isolated_gpus_and_overdue_cards_are_exported() -> None:
    entry = gpu_isolation.IsolatedGpu("GPU-0a8e", "0000:2a:00.0", "1", NOW, "xid-48", capacity=4)
    node = fleet.Node(
        "gpu-node-a", "a", 3, 3,
        annotations={annotation_keys.GPU_ISOLATED: gpu_isolation.to_annotation((entry,)) or ""},
    )
    state = admission.admit([], (), None, 1, settings.IsolationSettings(), NOW).state
    result = tick.TickResult(
        at=NOW,
        decision=isolate.IsolationDecision((), (), state),
        snapshot=fleet.FleetSnapshot(NOW, nodes=(node,)),
        gpus=[gpu_step.Outcome("gpu-node-a", gpu_step.Step.HELD, "", overdue=(entry,))],
    )
    metrics = telemetry.GuardMetrics()
    metrics.observe(result)
    seen = values(metrics)
    labels = (("gpu", "1"), ("node", "gpu-node-a"), ("uuid", "GPU-0a8e"))
    assert seen[("gpuguard_gpu_isolated", labels)] == NOW.timestamp()
    assert seen[("gpuguard_gpu_isolation_overdue", labels)] == 1
    metrics.set_leading(False)
    assert ("gpuguard_gpu_isolated", labels) not in values(metrics)


def test_a_rollouts_nodes_per_phase_and_where_it_stopped_are_exported() -> None:
    stopped = rollout.Plan("drv-580", change.RolloutState.STOPPED, (), (), 12, 1,
                           ("gpu-node-000", "ipvs-loaded"),
                           {"failed": 1, "done": 0, "pending": 11})
    result = tick.TickResult(
        at=NOW, decision=isolate.IsolationDecision((), (), admission.admit(
            [], admission.history([]), None, 12, settings.IsolationSettings(), NOW).state),
        changes=[change_step.Outcome("drv-580", stopped), change_step.Outcome("bad", error="x")],
    )  # fmt: skip
    metrics = telemetry.GuardMetrics()
    metrics.set_leading(True)
    metrics.observe(result)
    seen = values(metrics)
    assert seen[("gpuguard_change_nodes", (("change", "drv-580"), ("phase", "pending")))] == 11
    assert seen[("gpuguard_change_nodes", (("change", "drv-580"), ("phase", "failed")))] == 1
    key = ("gpuguard_change_stopped",
           (("change", "drv-580"), ("check", "ipvs-loaded"), ("node", "gpu-node-000")))
    assert seen[key] == 1
    metrics.observe(dataclasses.replace(result, changes=[]))  # the change ConfigMap deleted
    assert not [k for k in values(metrics) if k[0].startswith("gpuguard_change_")]


def test_forged_marks_are_not_counted_as_gpuguards_isolations() -> None:
    """A cordon whose ``isolated-at`` someone else wrote (managedFields) is not gpuguard's: no
    ``gpuguard_isolated_nodes`` series, no room taken in the breaker — the ownership check
    ``explain`` and the return step use (``fleet.Node.marks.isolation``)."""
    marks = {annotation_keys.ISOLATED_AT: "2026-09-21T05:00:00Z", annotation_keys.REASON: "xid-79"}
    ours = fleet.Node("gpu-node-a", "a", 8, 7, unschedulable=True, annotations=marks,
                      isolation_writers=frozenset({annotation_keys.FIELD_MANAGER}))
    forged = dataclasses.replace(ours, name="gpu-node-b",
                                 isolation_writers=frozenset({"kubectl-annotate"}))
    history = admission.history([ours, forged])
    assert [i.node for i in history] == ["gpu-node-a"]
    state = admission.admit([], history, None, 2, settings.IsolationSettings(), NOW).state
    result = tick.TickResult(at=NOW, decision=isolate.IsolationDecision((), (), state),
                             snapshot=fleet.FleetSnapshot(NOW, nodes=(ours, forged)))
    metrics = telemetry.GuardMetrics()
    metrics.observe(result)
    isolated = {dict(labels)["node"] for (name, labels), value in values(metrics).items()
                if name == "gpuguard_isolated_nodes" and value == 1}
    assert isolated == {"gpu-node-a"}


def test_each_repair_is_counted_by_action_and_result() -> None:
    """docs/remediation.md: gpuguard_remediations_total{action,result}; a wait is no repair."""
    def outcome(step: remediation_policy.Step, mark: remediation_model.Mark | None
                ) -> remediation_step.Outcome:  # fmt: skip
        return remediation_step.Outcome(remediation_policy.Decision("n", step, "-"), "-", mark)

    def mark(result: remediation_model.Result) -> remediation_model.Mark:
        return remediation_model.Mark(remediation_model.Action.POWER_CYCLE, result, NOW, "t", "-")

    metrics = telemetry.GuardMetrics()
    metrics.observe(tick.TickResult(at=NOW, remediations=[
        outcome(remediation_policy.Step.POWER_CYCLE, mark(remediation_model.Result.DONE)),
        outcome(remediation_policy.Step.POWER_CYCLE, mark(remediation_model.Result.FAILED)),
        outcome(remediation_policy.Step.WAIT, None)]))  # fmt: skip
    seen = values(metrics)
    for result in ("done", "failed"):
        key = (("action", "power-cycle"), ("result", result))
        assert seen[("gpuguard_remediations_total", key)] == 1
    counted = [v for k, v in seen.items() if k[0] == "gpuguard_remediations_total"]
    assert sum(counted) == 2  # the wait counted nothing
