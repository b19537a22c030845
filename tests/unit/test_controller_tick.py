"""One guard tick with fake ports: fail closed, dry-run, leadership before writes, 409."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pytest

from gpuguard.controller import failsafe, recovery, tick
from gpuguard.errors import ConflictError, GpuguardError, SourceError
from gpuguard.model import annotation_keys, decisions, fleet, jobs, settings, withheld
from gpuguard.model import metric_names as names
from tests import fakes
from tests import recovery_builders as test_controller_recovery
from tests.builders import Classifier
from tests.tick_world import NOW, xid79_world


def guard(**overrides: object) -> tuple[tick.Guard, fakes.FakeWriter]:
    cluster, metrics = xid79_world()
    writer = fakes.FakeWriter()
    parts: dict[str, object] = {
        "metrics": metrics,
        "cluster": cluster,
        "writer": writer,
        "classifier": Classifier(),
        "settings": settings.GuardSettings(),
        "clock": fakes.FakeClock(NOW),
    }
    parts.update(overrides)
    return tick.Guard(**parts), writer  # type: ignore[arg-type]


def test_tick_isolates_and_records_an_event() -> None:
    g, writer = guard()
    result = g.tick()
    assert result.ok
    assert [name for name, _ in writer.isolated] == ["gpu-node-b"]
    assert [a.node for a in writer.events] == ["gpu-node-b"]


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(SourceError("HTTP 503"), id="error-answer"),
        pytest.param(SourceError("newest sample is 0:10:00 old"), id="stale-answer"),
        pytest.param(SourceError("no series for kube-state-metrics"), id="partial-answer"),
    ],
)
def test_a_bad_prometheus_answer_isolates_nothing(error: Exception) -> None:
    g, writer = guard(metrics=fakes.FakeMetrics(error=error))
    result = g.tick()
    assert result.error_kind == "source"
    assert result.decision is None
    assert writer.isolated == []


def test_dry_run_decides_but_writes_nothing() -> None:
    g, writer = guard(dry_run=True)
    result = g.tick()
    assert [a.node for a in result.decision.actions] == ["gpu-node-b"]  # type: ignore[union-attr]
    assert [reason for _, reason in result.skipped] == ["dry-run"]
    assert writer.isolated == []


def test_a_replica_that_is_not_the_leader_never_writes() -> None:
    g, writer = guard(is_leader=lambda: False)
    result = g.tick()
    assert writer.isolated == []
    assert [reason for _, reason in result.skipped] == ["not the leader"]


def test_conflict_leaves_the_node_for_the_next_tick() -> None:
    writer = fakes.FakeWriter(errors={"gpu-node-b": ConflictError("409")})
    g, _ = guard(writer=writer)
    result = g.tick()
    assert result.ok
    assert writer.isolated == []
    assert "conflict" in result.skipped[0][1]


def test_event_failure_does_not_undo_or_hide_the_isolation() -> None:
    writer = fakes.FakeWriter(event_error=GpuguardError("events forbidden"))
    g, _ = guard(writer=writer)
    result = g.tick()
    assert [a.node for a in result.applied] == ["gpu-node-b"]


def test_metrics_are_read_at_the_tick_instant() -> None:
    metrics = xid79_world()[1]
    g, _ = guard(metrics=metrics)
    g.tick()
    assert metrics.asked_at == [NOW]


def test_a_failed_metrics_read_still_keeps_the_nodes_for_explain() -> None:
    g, _ = guard(metrics=fakes.FakeMetrics(error=SourceError("HTTP 503")))
    result = g.tick()
    assert result.snapshot is not None
    assert [n.name for n in result.snapshot.nodes] == ["gpu-node-a", "gpu-node-b"]
    assert result.decision is None


def test_opt_in_phantom_cordon_waits_when_the_tick_already_isolated_one() -> None:
    from gpuguard.controller import phantom_watch
    from tests.builders import PhantomSource as Source
    from tests.builders import window

    watch = phantom_watch.PhantomWatch(
        Source((window(gpu="5"),)), settings.PhantomSettings(cordon=True)
    )
    cluster, metrics = xid79_world()
    cluster.node_list.append(fleet.Node("gpu-node-1", "boot-1", 8, 8))
    g, writer = guard(cluster=cluster, metrics=metrics, phantom=watch)
    result = g.tick()
    assert [name for name, _ in writer.isolated] == ["gpu-node-b"]  # the Xid 79 first
    assert result.phantom is not None
    assert [p.node for p in result.phantom.phantoms] == ["gpu-node-1"]


def test_a_woken_tick_cordons_on_the_standing_phantom_decision_without_running_one() -> None:
    """A wake (docs/design.md#fast-path) must not wait for the phantom check's queries over
    every GPU: the isolation is decided first, the check runs at the next regular tick."""
    from gpuguard.controller import phantom_watch
    from tests.builders import PhantomSource as Source
    from tests.builders import window

    source = Source((window(gpu="5"),))
    watch = phantom_watch.PhantomWatch(source, settings.PhantomSettings())
    g, writer = guard(phantom=watch)
    result = g.tick(urgent=True)
    assert [name for name, _ in writer.isolated] == ["gpu-node-b"]
    assert source.asked == []  # due, but not run by the woken tick
    assert result.phantom is None
    g.tick()
    assert source.asked == [NOW]  # the regular tick runs it


class FakeNotifier:
    def __init__(self) -> None:
        self.told: list[decisions.Action] = []

    def notify(self, action: decisions.Action, now: datetime) -> None:
        self.told.append(action)


def tripped_world() -> tuple[fakes.FakeCluster, fakes.FakeMetrics]:
    """Four of five nodes report Xid 79 with a GPU gone at one instant: a burst."""
    nodes = [fleet.Node(f"gpu-node-{i}", f"boot-{i}", 8, 7) for i in range(4)]
    nodes.append(fleet.Node("gpu-node-ok", "boot-ok", 8, 8))
    series = [
        fleet.MetricSample(
            names.DCGM_XID_LAST,
            {"Hostname": n.name, "gpu": "4", "UUID": f"GPU-{n.name}"},
            79.0,
            NOW,
        )
        for n in nodes[:4]
    ]
    return fakes.FakeCluster(nodes), fakes.FakeMetrics(series)


def test_a_withheld_fault_is_marked_on_its_node_with_a_warning_and_a_notification() -> None:
    cluster, metrics = tripped_world()
    notifier = FakeNotifier()
    g, writer = guard(cluster=cluster, metrics=metrics, notifier=notifier)
    result = g.tick()
    assert result.decision is not None
    assert result.decision.breaker.tripped_now
    assert [name for name, _ in writer.isolated] == ["gpu-node-0"]
    marked = {name: marks[annotation_keys.WITHHELD] for name, marks in writer.annotated}
    assert sorted(marked) == ["gpu-node-1", "gpu-node-2", "gpu-node-3"]
    assert all(value is not None and "breaker-tripped" in value for value in marked.values())
    warned = [a.node for a in writer.events if a.reason is decisions.Reason.BREAKER_TRIPPED]
    assert sorted(warned) == ["gpu-node-1", "gpu-node-2", "gpu-node-3"]
    assert len(notifier.told) == 4  # the isolation and the three withheld faults


def test_a_tripped_breaker_isolates_nothing_on_later_ticks_and_marks_nothing_twice() -> None:
    cluster, metrics = tripped_world()
    g, writer = guard(cluster=cluster, metrics=metrics)
    g.tick()
    written: dict[str, dict[str, str]] = {name: dict(m) for name, m in writer.isolated}
    written |= {name: {k: v for k, v in m.items() if v} for name, m in writer.annotated}
    cluster.node_list = [
        replace(
            n,
            annotations=dict(written.get(n.name, {})),
            unschedulable=annotation_keys.ISOLATED_AT in written.get(n.name, {}),
        )
        for n in cluster.node_list
    ]
    writer.isolated.clear()
    writer.annotated.clear()
    later = g.tick()
    assert later.decision is not None
    assert later.decision.breaker.tripped_since is not None
    assert writer.isolated == []
    assert writer.annotated == []  # marks stand; nothing rewritten


def test_a_withheld_fault_stays_pending_after_its_xid_ages_out() -> None:
    mark = withheld.WithheldMark(
        decisions.Reason.BREAKER_LEVEL, NOW, "xid-79", gpu="4", uuid="GPU-1"
    ).to_annotation()
    waiting = fleet.Node("gpu-node-b", "boot-b", 8, 7, annotations={annotation_keys.WITHHELD: mark})
    g, writer = guard(cluster=fakes.FakeCluster([waiting]), metrics=fakes.FakeMetrics([]))
    g.tick()
    ((name, marks),) = writer.isolated
    assert name == "gpu-node-b"
    assert marks[annotation_keys.REASON] == "xid-79"
    assert marks[annotation_keys.GPU_UUID] == "GPU-1"


def test_a_withheld_mark_is_removed_when_the_gpu_came_back() -> None:
    mark = withheld.WithheldMark(decisions.Reason.BREAKER_LEVEL, NOW, "xid-79").to_annotation()
    healed = fleet.Node("gpu-node-b", "boot-b", 8, 8, annotations={annotation_keys.WITHHELD: mark})
    g, writer = guard(cluster=fakes.FakeCluster([healed]), metrics=fakes.FakeMetrics([]))
    g.tick()
    assert writer.annotated == [("gpu-node-b", {annotation_keys.WITHHELD: None})]
    assert writer.isolated == []


class BrokenClassifier:
    def is_hardware(self, code: int) -> bool:
        raise KeyError(code)  # a bug, not an input error: nothing in the tick handles it


def world_with_gpu_node_c_isolated() -> tuple[
    recovery.Recovery, fakes.FakeJobs, fakes.FakeCluster, fakes.FakeMetrics
]:
    """xid79_world with gpu-node-c already isolated, and the recovery step that sees it."""
    rec, step_jobs, _, _ = test_controller_recovery.make()
    cluster, metrics = xid79_world()
    isolated = test_controller_recovery.isolated_node()
    cluster.node_list = [*cluster.node_list, fleet.Node(
        "gpu-node-c", isolated.boot_id, 8, 7, unschedulable=True,
        annotations=isolated.annotations)]  # fmt: skip
    return rec, step_jobs, cluster, metrics


def test_an_exception_on_one_nodes_input_costs_that_node_and_the_next_steps_run() -> None:
    rec, step_jobs, cluster, metrics = world_with_gpu_node_c_isolated()
    g, writer = guard(classifier=BrokenClassifier(), cluster=cluster, metrics=metrics,
                      recovery=rec)  # fmt: skip
    result = g.tick()
    assert result.decision is not None  # gpu-node-a and gpu-node-c were decided
    assert writer.isolated == []
    assert result.step_errors == [("isolate", "node gpu-node-b (annotations {}): KeyError: 79")]
    assert [m["spec"]["template"]["spec"]["nodeName"] for m in step_jobs.created] == ["gpu-node-c"]


def test_a_step_that_raises_for_every_node_fails_closed_as_a_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def explode(*_: object) -> None:
        raise RuntimeError("a bug in the policy")

    g, writer = guard()
    monkeypatch.setattr(failsafe.isolate, "decide", explode)
    result = g.tick()
    assert result.decision is None
    assert writer.isolated == []
    assert [step for step, _ in result.step_errors] == ["isolate"]


def test_a_node_whose_step_raises_costs_only_that_node() -> None:
    rec, step_jobs, _, _ = test_controller_recovery.make()
    isolated = test_controller_recovery.isolated_node()
    bad = fleet.Node("gpu-node-x", "b", 8, 7, unschedulable=True,
                     annotations={**isolated.annotations, "gpuguard.io/reason": "xid-²"})
    results = {"gpu-node-x": RuntimeError("unexpected")}
    original = step_jobs.result

    def result(name: str, created_uid: str | None = None) -> jobs.JobResult:
        if "gpu-node-x" in name:
            raise results["gpu-node-x"]
        return original(name, created_uid)

    step_jobs.result = result  # type: ignore[method-assign]
    errors: list[tuple[str, str]] = []
    steps = rec.run((bad, isolated), NOW, may_write=lambda: True, errors=errors)
    assert [s.node for s in steps] == ["gpu-node-b"]
    ((step, failure),) = errors
    assert step == "recovery"
    assert failure.startswith("node gpu-node-x (annotations {")
    assert "xid-²" in failure
    assert "RuntimeError: unexpected" in failure


def test_a_wake_during_a_tick_leaves_its_later_steps_to_the_woken_tick() -> None:
    # A GPU gone from the bus must not wait for a return's or a recovery's queries.
    rec, step_jobs, cluster, metrics = world_with_gpu_node_c_isolated()
    g, writer = guard(cluster=cluster, metrics=metrics, recovery=rec)
    cut = g.tick(woken=lambda: True)
    assert [name for name, _ in writer.isolated] == ["gpu-node-b"]  # the isolation still ran
    assert cut.left_to_next == (
        "Recovery", "Remediation", "ReturnToPool", "Changes", "FleetHealth", "FitnessLabel"
    )
    assert step_jobs.created == []
    assert cut.recovery == []
    woken = g.tick(urgent=True, woken=lambda: False)  # the woken tick runs what was left
    assert woken.left_to_next == ()
    assert [m["spec"]["template"]["spec"]["nodeName"] for m in step_jobs.created] == ["gpu-node-c"]
