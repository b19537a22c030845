"""Phantom checks in the guard's loop: reported every interval, a bad answer reports nothing
and cordons nothing, opt-in cordons respect the breaker, the tick limit and human cordons."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpuguard.controller import phantom_watch
from gpuguard.errors import SourceError
from gpuguard.model import annotation_keys, fleet, settings
from gpuguard.policy import isolate
from tests.builders import Classifier, window
from tests.builders import PhantomSource as Source

NOW = datetime(2026, 9, 21, 6, 0, tzinfo=UTC)


def test_phantoms_are_found_once_per_interval() -> None:
    source = Source((window(gpu="5"), window(gpu="6")))
    watch = phantom_watch.PhantomWatch(source, settings.PhantomSettings())
    first = watch.run(NOW)
    assert first is not None
    assert len(first.phantoms) == 2
    assert first.wasted_w > 0
    assert watch.run(NOW + timedelta(seconds=30)) is None
    assert watch.run(NOW + timedelta(minutes=1)) is not None
    assert len(source.asked) == 2


def test_a_bad_answer_reports_nothing() -> None:
    watch = phantom_watch.PhantomWatch(
        Source(error=SourceError("stale")), settings.PhantomSettings()
    )
    decision = watch.run(NOW)
    assert decision is not None
    assert decision.phantoms == ()
    assert decision.actions == ()


def snapshot(*nodes: fleet.Node) -> fleet.FleetSnapshot:
    return fleet.FleetSnapshot(NOW, nodes=nodes)


def test_opt_in_cordons_go_through_the_breaker_after_faults_and_skip_human_cordons() -> None:
    cordoning = settings.PhantomSettings(cordon=True)
    decision = phantom_watch.PhantomWatch(Source((window(gpu="5"),)), cordoning).run(NOW)
    assert decision is not None
    assert decision.actions
    node = fleet.Node("gpu-node-1", "boot-1", 8, 8)
    human = fleet.Node("gpu-node-1", "boot-1", 8, 8, unschedulable=True)
    marks = {annotation_keys.ISOLATED_AT: "2026-09-21T05:50:00Z"}
    unconfirmed = [
        fleet.Node(f"old-{i}", "b", 8, 7, unschedulable=True, annotations=marks) for i in range(2)
    ]
    guard = settings.GuardSettings()

    def decide(*nodes: fleet.Node) -> isolate.IsolationDecision:
        return isolate.decide(snapshot(*nodes), Classifier(), guard, decision.actions)

    (action,) = decide(node).actions
    assert action.annotations[annotation_keys.BOOT_ID] == "boot-1"
    assert action.annotations[annotation_keys.GPU_CAPACITY] == "8"
    assert decide(human).actions == ()
    withheld = decide(node, *unconfirmed)
    assert withheld.actions == ()
    assert withheld.withheld["gpu-node-1"].fault == "phantom-utilization"


def test_by_default_phantom_never_cordons() -> None:
    decision = phantom_watch.PhantomWatch(
        Source((window(gpu="5"),)), settings.PhantomSettings()
    ).run(NOW)
    assert decision is not None
    assert decision.phantoms
    assert decision.actions == ()


def test_a_gpu_the_agent_saw_a_process_on_is_never_phantom() -> None:
    source = Source((window(gpu="5"), window(gpu="6")), processes={"GPU-5": 1, "GPU-6": 0})
    decision = phantom_watch.PhantomWatch(source, settings.PhantomSettings()).run(NOW)
    assert decision is not None
    assert [p.gpu for p in decision.phantoms] == ["6"]
