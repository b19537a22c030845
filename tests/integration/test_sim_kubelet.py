"""gpuguard's Jobs run on their pinned node in the simulator, and the guard's Job adapter reads
their termination message over HTTP."""

from __future__ import annotations

from datetime import timedelta

import lightkube
import pytest

from gpuguard.actuators import jobs
from gpuguard.model import jobs as job_model
from gpuguard.sim import clock, kubeapi, kubelet, scenario, state, store, world

pytestmark = pytest.mark.integration


def two_nodes() -> world.World:
    spec = scenario.from_mapping(
        {
            "name": "jobs",
            "fleet": {"nodes": ["gpu-node-a", "gpu-node-b"], "gpus_per_node": 8,
                      "model": "NVIDIA H100 80GB HBM3", "driver": "580.126.09"},
            "events": [{"at": "1m", "reboot": {"node": "gpu-node-b"}}],
        },
        source="test",
    )
    return world.World.from_scenario(spec, store.ObjectStore(), clock.SimClock(spec.start))


def test_a_pinned_job_runs_on_its_node_and_reports_its_message() -> None:
    played = two_nodes()
    ran: list[tuple[str, list[str]]] = []

    def run(node: state.SimNode, argv: list[str]) -> tuple[int, str]:
        ran.append((node.name, argv))
        return 0, '{"verdict": "power-cycle"}'

    runner = kubelet.JobKubelet(played, run, runtime=timedelta(seconds=30))
    manifest = jobs.evidence_job("gpu-node-a", "2026-09-21T06:05:10Z", image="gpuguard:test")
    name = manifest["metadata"]["name"]
    with kubeapi.serve(played.store) as api, lightkube.Client(
        config=kubeapi.lightkube_config(api.url)
    ) as client:
        adapter = jobs.Jobs(client)
        assert adapter.create(manifest) is True
        assert adapter.create(manifest) is False  # the next tick finds it again
        assert adapter.result(name).state is job_model.JobState.ABSENT
        runner.step()
        assert adapter.result(name).state is job_model.JobState.RUNNING
        played.step_to(timedelta(seconds=45))
        runner.step()
        result = adapter.result(name)
    assert result.state is job_model.JobState.SUCCEEDED
    assert result.message == '{"verdict": "power-cycle"}'
    assert result.started_at == played.origin  # the pod started on the first kubelet pass
    assert ran == [("gpu-node-a", manifest["spec"]["template"]["spec"]["containers"][0]["command"])]


def test_a_job_waits_while_its_node_is_down_and_fails_on_a_missing_node() -> None:
    played = two_nodes()
    runner = kubelet.JobKubelet(played, lambda node, argv: (0, "ok"))
    played.step_to(timedelta(minutes=1, seconds=10))  # gpu-node-b is rebooting
    down = jobs.evidence_job("gpu-node-b", "t", image="gpuguard:test")
    ghost = jobs.evidence_job("gpu-node-z", "t", image="gpuguard:test")
    for manifest in (down, ghost):
        played.store.create("Job", "gpuguard", manifest)
    runner.step()
    pods = {p["metadata"]["name"]: p for p in played.store.list("Pod", "gpuguard")}
    assert down["metadata"]["name"] not in pods
    assert pods[ghost["metadata"]["name"]]["status"]["phase"] == "Failed"
    assert "not found" in pods[ghost["metadata"]["name"]]["status"]["containerStatuses"][0][
        "state"]["terminated"]["message"]
