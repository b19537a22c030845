"""The storm breaker end to end in the simulator: a small fleet isolates unrelated faults while
a node waits for a card; a metric storm trips it, and a person's reset judges current facts."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import lightkube
import pytest

from gpuguard.actuators import nodes
from gpuguard.controller import breaker
from gpuguard.demo import harness, score
from gpuguard.model import settings
from gpuguard.sim import kubeapi, scenario
from gpuguard.sources import kubernetes

STORM = [f"gpu-node-{i * 2:03d}" for i in range(20)]


@pytest.fixture(scope="module")
def storm() -> harness.ScenarioRun:
    return harness.play(scenario.load_shipped("metric-storm"), settings.GuardSettings())


def report_of(run: harness.ScenarioRun) -> dict[str, Any]:
    return score.scenario_report(run)


def test_a_small_fleet_isolates_two_unrelated_faults_while_a_node_waits_for_a_card() -> None:
    run = harness.play(scenario.load_shipped("small-fleet-two-faults"), settings.GuardSettings())
    report = report_of(run)
    assert report["isolated"] == ["gpu-node-a", "gpu-node-b", "gpu-node-c"]
    assert all(seconds <= 60 for seconds in report["time_to_isolate_s"].values())
    assert report["withheld"] == []
    assert report["false_isolations"] == []


def test_a_metric_storm_trips_once_isolates_one_and_withholds_the_rest(
    storm: harness.ScenarioRun,
) -> None:
    report = report_of(storm)
    assert report["isolated"] == ["gpu-node-000"]
    assert report["false_isolations"] == []
    (trip,) = report["breaker"]["trips"]
    assert trip["candidates"] == 20
    withheld_nodes = {w["node"] for w in report["withheld"]}
    assert withheld_nodes == set(STORM[1:]) | {"gpu-node-049"}  # the trip holds for hours
    assert {w["reason"] for w in report["withheld"]} == {"breaker-tripped"}


def test_a_metric_storm_is_in_the_history_but_escalates_no_card(
    storm: harness.ScenarioRun,
) -> None:
    report = report_of(storm)
    storm_lines = [line for line in report["ledger"] if line["node"] in STORM]
    assert {line["node"] for line in storm_lines} == set(STORM)
    assert {line["confirmation"] for line in storm_lines} == {"observed"}
    assert {card["escalation"] for card in report["cards"].values()} == {"none"}


def test_a_reset_removes_the_trip_marks_only(storm: harness.ScenarioRun) -> None:
    objects = storm.played.store
    with kubeapi.serve(objects) as server, lightkube.Client(
        config=kubeapi.lightkube_config(server.url), field_manager="gpuguard"
    ) as client:
        reader = kubernetes.KubernetesReader(client)
        now = datetime.now(UTC)
        writer = nodes.NodeWriter(client)
        dry = breaker.reset(reader, writer, who="alice", now=now, dry_run=True)
        assert len(dry.reset) == 20
        assert len(breaker.tripped_nodes(reader.nodes())) == 20
        done = breaker.reset(reader, writer, who="alice", now=now, dry_run=False)
        assert sorted(done.reset) == sorted([*STORM[1:], "gpu-node-049"])
        assert breaker.tripped_nodes(reader.nodes()) == ()
        assert all(n.marks.withheld is None for n in reader.nodes())
    events = [e for e in objects.list("Event", "default") if e.get("reason") == "BreakerReset"]
    assert len(events) == 20
    assert "alice" in events[0]["message"]
