"""`gpuguard change`: a rollout's status from the cluster (what the controller would do now,
changing nothing), pause/resume/abort as the ConfigMap's control key, the versions per pool,
and one-line errors."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from gpuguard.cli.main import app
from gpuguard.model import change
from gpuguard.sim import clock, kubeapi, scenario, store, world
from gpuguard.sim import kube_objects as objects

FLEET = """
name: t
fleet: {nodes: 4}
events:
  - {at: 1m, rollout: {name: drv, driver: "580.159.03", waves: [1, "100%"]}}
"""


@pytest.fixture(scope="module")
def api() -> Iterator[tuple[str, store.ObjectStore]]:
    spec = scenario.loads(FLEET)
    objs = store.ObjectStore()
    w = world.World.from_scenario(spec, objs, clock.SimClock(spec.start))
    w.step_to(spec.end)
    node = objs.get("Node", "", "gpu-node-003")
    node["metadata"]["labels"][objects.GFD_DRIVER_LABEL] = "575.57.08"
    objs.replace("Node", "", "gpu-node-003", node)
    with kubeapi.serve(objs) as server:
        yield server.url, objs


def run(*args: str, server: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["change", *args, "--kube-server", server])
    return result.exit_code, result.output


def test_status_shows_the_first_wave_without_writing(
    api: tuple[str, store.ObjectStore],
) -> None:
    url, objs = api
    before = objs.resource_version
    code, out = run("status", "drv", "-o", "json", "--prometheus-url", "http://127.0.0.1:9",
                    server=url)
    assert code == 0, out
    data = json.loads(out)
    assert data["state"] == "running"
    assert data["pool"] == 4
    assert [n["step"] for n in data["nodes"] if n["node"] == "gpu-node-000"] == [
        "cordon-for-change"]
    assert objs.resource_version == before  # status never writes


def test_pause_and_resume_write_the_control_key(api: tuple[str, store.ObjectStore]) -> None:
    url, objs = api
    assert run("pause", "drv", server=url)[0] == 0
    assert objs.get("ConfigMap", "gpuguard", "drv")["data"][change.CONTROL_KEY] == "pause"
    assert run("resume", "drv", server=url)[0] == 0
    assert objs.get("ConfigMap", "gpuguard", "drv")["data"][change.CONTROL_KEY] == "run"


def test_an_unknown_change_is_one_line_and_exit_2(api: tuple[str, store.ObjectStore]) -> None:
    url, _ = api
    code, out = run("abort", "nope", server=url)
    assert code == 2
    assert out.startswith("error: change gpuguard/nope")
    assert len(out.splitlines()) == 1
    code, out = run("status", "nope", "--prometheus-url", "http://127.0.0.1:9", server=url)
    assert code == 2
    assert "no such change" in out
    assert len(out.splitlines()) == 1


def test_drift_lists_the_versions_in_use_per_pool(api: tuple[str, store.ObjectStore]) -> None:
    url, _ = api
    code, out = run("drift", "-o", "json", server=url)
    assert code == 0, out
    (pool,) = json.loads(out)
    assert pool["drift"] is True
    assert {v["driver"]: v["nodes"] for v in pool["versions"]} == {
        "575.57.08": ["gpu-node-003"],
        "580.126.09": ["gpu-node-000", "gpu-node-001", "gpu-node-002"],
    }
