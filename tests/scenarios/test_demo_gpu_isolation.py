"""GPU-level isolation end to end in the simulator: the guard isolates one card, its pinned
Jobs (admitted by the admission policy) keep it out across device-plugin restarts and reboots,
jobs on the host cannot use it, and it comes back only when a person asks and its history
allows."""

from __future__ import annotations

import pytest

from gpuguard.demo import harness, score
from gpuguard.model import settings
from gpuguard.sim import scenario, state
from tests import demo_runs
from tests.admission import IMAGE, failed_rules

GUARD = settings.GuardSettings.load(None, {"GPUGUARD_CONTROLLER__IMAGE": IMAGE})


@pytest.fixture(scope="module")
def host_docker() -> harness.ScenarioRun:
    return harness.play(scenario.load_shipped("host-docker-isolated-gpu"), GUARD)


def details(run: harness.ScenarioRun, kind: str, *, drafted: bool = False) -> list[str]:
    """The timeline's details of ``kind``; drafted requests (reason ``escalated``) apart."""
    return [
        e["detail"]
        for e in score.timeline(run)
        if e["kind"] == kind and (e["reason"] == "escalated") == drafted
    ]


def test_a_host_docker_job_never_gets_the_isolated_gpu(host_docker: harness.ScenarioRun) -> None:
    jobs = details(host_docker, "host_job")
    assert len(jobs) == 2
    assert all("fails on GPU 2: cudaErrorDevicesUnavailable" in j for j in jobs)


def test_it_is_re_applied_after_a_plugin_restart_and_a_reboot(
    host_docker: harness.ScenarioRun,
) -> None:
    applied = details(host_docker, "gpu")
    assert "not applied yet" in applied[0]
    assert "device plugin restarted" in applied[1]
    assert "booted again" in applied[2]
    (request,) = details(host_docker, "gpu", drafted=True)
    assert "GPU 2 of gpu-node-a is out of service" in request
    assert "slot 0000:3a:00.0" in request
    report = score.scenario_report(host_docker)
    assert report["isolated"] == []
    assert [(g["node"], g["gpu"]) for g in report["gpu_isolated"]] == [("gpu-node-a", "2")]
    assert report["healthy_gpu_hours_out"] == 0
    assert "train-b Running on GPU [0, 1, 3] (training)" in details(host_docker, "workload")


def test_every_gpu_isolation_job_is_one_the_admission_policy_admits(
    host_docker: harness.ScenarioRun,
) -> None:
    jobs = host_docker.played.store.list("Job")
    assert len(jobs) == 3
    for job in jobs:
        assert failed_rules(job) == []


@pytest.mark.parametrize("name", ["xid79-twice", "user-xid13-then-xid79"])
def test_a_gpu_off_the_bus_still_cordons_the_node(name: str) -> None:
    report = score.scenario_report(demo_runs.play(name, GUARD))
    assert report["isolated"]
    assert report["gpu_isolated"] == []


def one_node_scenario(name: str, description: str, duration: str, events: str) -> str:
    """A one-node scenario (4 RTX PRO 6000) where GPU 1 is isolated (``{uuid}``: its card)."""
    return (f"name: {name}\ndescription: {description}\nstart: \"2026-08-10T00:00:00Z\"\n"
            f"duration: {duration}\nfleet:\n  nodes: [gpu-node-a]\n  gpus_per_node: 4\n"
            "  model: NVIDIA RTX PRO 6000 Blackwell Server Edition\nevents:\n"
            f"{events}expect:\n  isolate_gpus: [gpu-node-a/1]\n")


def with_card(text: str, uuid: str) -> scenario.Scenario:
    return scenario.loads(text.replace("{uuid}", uuid))


RETURN = one_node_scenario(
    "gpu-return", "one DBE, the GPU isolated, then a person asks it back", "3h", """\
  - {at: 10m, dbe: {node: gpu-node-a, gpu: 1}}
  - {at: 2h, annotate: {node: gpu-node-a, key: gpuguard.io/gpu-return, value: "{uuid}"}}
""")


def test_a_gpu_asked_back_returns_with_every_mechanism_undone() -> None:
    uuid = state.new_uuid("gpu-node-a/0000:2a:00.0")
    run = harness.play(with_card(RETURN, uuid), GUARD)
    report = score.scenario_report(run)
    assert report["gpu_isolated"] == []
    assert any("back in service" in d for d in details(run, "gpu"))
    node = run.played.store.get("Node", "", "gpu-node-a")
    assert "gpuguard.io/device-plugin" not in (node["metadata"].get("labels") or {})
    assert not any(k.startswith("gpuguard.io/gpu-") for k in node["metadata"]["annotations"])
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "4"
    assert run.played.node("gpu-node-a").gpu(1).compute_mode == "DEFAULT"


REPAIR = one_node_scenario(
    "gpu-repair-return",
    "a second DBE marks a row for remapping; a return refused until a GPU reset applies it",
    "4h", """\
  - {at: 10m, dbe: {node: gpu-node-a, gpu: 1}}
  - {at: 40m, dbe: {node: gpu-node-a, gpu: 1, remap: true}}
  - {at: 1h, annotate: {node: gpu-node-a, key: gpuguard.io/gpu-return, value: "{uuid}"}}
  - {at: 1h30m, gpu_reset: {node: gpu-node-a, gpu: 1}}
  - {at: 2h, annotate: {node: gpu-node-a, key: gpuguard.io/gpu-return, value: "{uuid}"}}
  - {at: 3h, workload: {node: gpu-node-a, gpus: 4, profile: training, name: all-four}}
""")

SLOW = one_node_scenario(
    "gpu-burnin-fails",
    "a DBE, then the card also runs slow; asked back, its own burn-in fails", "3h", """\
  - {at: 10m, dbe: {node: gpu-node-a, gpu: 1}}
  - {at: 20m, gpu_slow: {node: gpu-node-a, gpu: 1, share: 0.4}}
  - {at: 1h, annotate: {node: gpu-node-a, key: gpuguard.io/gpu-return, value: "{uuid}"}}
""")

CARD_UUID = state.new_uuid("gpu-node-a/0000:2a:00.0")


@pytest.fixture(scope="module")
def repaired() -> harness.ScenarioRun:
    return harness.play(with_card(REPAIR, CARD_UUID), GUARD)


def test_a_pending_row_remap_refuses_the_return_until_a_reset(
    repaired: harness.ScenarioRun,
) -> None:
    steps = details(repaired, "gpu")
    refused = next(i for i, d in enumerate(steps) if "row remap pending" in d)
    checked = next(i for i, d in enumerate(steps) if "no row remap pending" in d)
    back = next(i for i, d in enumerate(steps) if "its burn-in passed" in d)
    assert refused < checked < back
    assert score.scenario_report(repaired)["gpu_isolated"] == []
    assert "all-four Running on GPU [0, 1, 2, 3] (training)" in details(repaired, "workload")


def test_the_returning_gpu_is_burnt_in_alone_by_an_admitted_job(
    repaired: harness.ScenarioRun,
) -> None:
    (burnin,) = [j for j in repaired.played.store.list("Job")
                 if j["metadata"]["labels"]["gpuguard.io/job"] == "burnin"]
    assert failed_rules(burnin) == []
    container = burnin["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][-2:] == ["--uuid", CARD_UUID]
    assert "nvidia.com/gpu" not in container["resources"]["limits"]


def test_a_card_that_fails_its_burnin_stays_out() -> None:
    run = harness.play(with_card(SLOW, CARD_UUID), GUARD)
    steps = details(run, "gpu")
    assert any("its burn-in failed" in d for d in steps)
    assert [g["uuid"] for g in score.scenario_report(run)["gpu_isolated"]] == [CARD_UUID]
    assert run.played.node("gpu-node-a").gpu(1).compute_mode == "PROHIBITED"
    node = run.played.store.get("Node", "", "gpu-node-a")
    assert "gpuguard.io/gpu-return" not in node["metadata"]["annotations"]
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "3"
