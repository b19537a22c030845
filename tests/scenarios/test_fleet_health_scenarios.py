"""Scheduling and interconnect health end to end
(docs/design.md#scheduling-and-interconnect-health): each shipped scenario played once through
``gpuguard demo``'s harness reports its kind, with the job name and GPU-hours for a gang, and
nothing else; the detectors stay silent on every other shipped scenario, the false-positive
traps included."""

from __future__ import annotations

from typing import Any

import pytest

from gpuguard.demo import findings, harness, score
from gpuguard.model import settings as settings_model
from gpuguard.sim import clock, scenario, store, world

SETTINGS = settings_model.GuardSettings()
OURS = {
    "gang-partial-allocation": "gang-partial-allocation",
    "tensor-parallel-split-pair": "topology-mismatch",
    "gpu-thermal-throttle": "gpu-throttled",
    "nvlink-crc-errors": "nvlink-errors",
    "ib-link-flapping": "ib-link-flapping",
}
FALSE_POSITIVE_TRAPS = ("user-xid-storm", "small-compute-workload", "mig-reconfig",
                        "driver-upgrade-dip", "metric-storm")  # fmt: skip


@pytest.fixture(scope="module")
def runs() -> dict[str, harness.ScenarioRun]:
    """One demo run per scenario."""
    return {name: harness.play(scenario.load_shipped(name), SETTINGS) for name in OURS}


@pytest.fixture(scope="module")
def reports(runs: dict[str, harness.ScenarioRun]) -> dict[str, dict[str, Any]]:
    return {name: score.scenario_report(run) for name, run in runs.items()}


def kinds(report: dict[str, Any]) -> list[str]:
    return [f["kind"] for f in report["findings"]]


@pytest.mark.parametrize(("name", "kind"), OURS.items())
def test_each_scenario_reports_its_kind_only_and_isolates_nothing(
    reports: dict[str, dict[str, Any]], name: str, kind: str
) -> None:
    report = reports[name]
    assert kinds(report) == [kind]
    assert report["isolated"] == []
    assert report["false_isolations"] == []


def test_the_default_scheduler_job_is_the_deadlock_not_the_gang_scheduled_ones(
    reports: dict[str, dict[str, Any]],
) -> None:
    [gang] = reports["gang-partial-allocation"]["findings"]
    assert (gang["job"], gang["namespace"], gang["system"]) == ("llm-pretrain", "ml", "job")
    assert (gang["pods_bound"], gang["pods_pending"], gang["gpus_held"]) == (3, 1, 12)
    assert gang["gpu_hours"] == pytest.approx(12 * 31 / 60, abs=0.1)  # Pending from 2m to 33m


def test_the_guard_told_the_stuck_job_once_with_an_event_on_its_owner(
    runs: dict[str, harness.ScenarioRun],
) -> None:
    store = runs["gang-partial-allocation"].played.store
    events = [e for e in store.list("Event", "ml") if e.get("reason") == "GangPartialAllocation"]
    [event] = events  # once while it lasts; never for the gang-scheduled jobs that hold nothing
    assert event["involvedObject"]["kind"] == "Job"
    assert event["involvedObject"]["name"] == "llm-pretrain"
    assert event["type"] == "Warning"
    assert "12 GPUs" in event["message"]


def test_the_split_pod_is_reported_and_the_paired_one_is_not(
    reports: dict[str, dict[str, Any]],
) -> None:
    [found] = reports["tensor-parallel-split-pair"]["findings"]
    assert found["gpu"] == "1,2"
    assert "vllm-tp2-split" in found["detail"]


@pytest.mark.parametrize(
    ("name", "where"),
    [
        pytest.param("gpu-thermal-throttle", ("gpu-node-1", "6"), id="thermal-not-power-cap"),
        pytest.param("nvlink-crc-errors", ("gpu-node-1", "2"), id="crc-not-rare-replays"),
        pytest.param("ib-link-flapping", ("gpu-node-2", None), id="flapping-port"),
    ],
)
def test_interconnect_findings_name_the_node_and_gpu(
    reports: dict[str, dict[str, Any]], name: str, where: tuple[str, str | None]
) -> None:
    [found] = reports[name]["findings"]
    assert (found["node"], found["gpu"]) == where


def test_totals_count_fleet_findings_apart_from_phantoms(
    reports: dict[str, dict[str, Any]],
) -> None:
    totals = score.totals(list(reports.values()))
    assert totals["fleet_health_findings"] == 5
    assert totals["phantom_gpus"] == 0


@pytest.mark.parametrize(
    "name", [n for n in scenario.shipped_names() if n not in OURS]
)
def test_no_fleet_health_finding_on_any_other_shipped_scenario(name: str) -> None:
    """The world played to its end without a guard (no isolation changes what the detectors
    read: pods, topology, clock events, link counters), read by the demo's detectors."""
    spec = scenario.load_shipped(name)
    played = world.World.from_scenario(spec, store.ObjectStore(), clock.SimClock(spec.start))
    played.step_to(spec.end)
    assert findings.fleet_health_findings(played, SETTINGS.fleet, played.now) == []


def test_the_false_positive_traps_are_all_checked() -> None:
    assert set(FALSE_POSITIVE_TRAPS) <= set(scenario.shipped_names()) - set(OURS)
