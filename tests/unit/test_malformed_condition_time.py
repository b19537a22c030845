"""One node whose condition carries a time that is not a time (``lastTransitionTime:
not-a-time``, which a lenient API server or a hand-made object can hold) does not make the
cluster unreadable: ``audit`` and ``gate`` (and ``health``, which reads through the gate's
reader) still read every node, that one included. (On the same cluster: ``audit --html``
says where it wrote its page.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuguard.cli.main import app
from gpuguard.sim import clock, kubeapi, scenario, store, world

BAD, OTHER = "gpu-node-a", "gpu-node-b"


@pytest.fixture(scope="module")
def api() -> Iterator[str]:
    spec = scenario.load_shipped("xid79-twice")
    objects = store.ObjectStore()
    world.World.from_scenario(spec, objects, clock.SimClock(spec.start))
    node = objects.get("Node", "", BAD)
    node["status"]["conditions"][0]["lastTransitionTime"] = "not-a-time"
    objects.replace("Node", "", BAD, node)
    with kubeapi.serve(objects) as served:
        yield served.url


def gpuguard(api: str, *args: str) -> tuple[int, str, str]:
    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, [*args, "--kube-server", api])
    return result.exit_code, result.stdout, result.stderr


def test_audit_reads_every_node(api: str) -> None:
    code, out, err = gpuguard(api, "audit", "-o", "json")
    assert "listing Nodes" not in err
    assert code in (0, 1), err  # findings or none; never "could not read"
    assert json.loads(out)


@pytest.mark.parametrize("node", [BAD, OTHER])
def test_gate_decides_for_the_node_and_beside_it(api: str, node: str) -> None:
    code, out, err = gpuguard(api, "gate", node, "--dry-run", "-o", "json")
    assert err == ""
    steps = {s["step"]: s for s in json.loads(out)["steps"]}
    assert steps["kubelet-version"]["status"] == "PASS"
    assert "on 1/1 workers" in steps["role-labels"]["evidence"]  # the other node was read
    assert code == 2  # no agent status, no burn-in Job: unknown, the taint stays


def test_audit_html_says_where_it_wrote(api: str, tmp_path: Path) -> None:
    page = tmp_path / "audit.html"
    _, out, err = gpuguard(api, "audit", "--html", str(page), "-o", "json")
    assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert err.strip() == f"wrote the HTML report to {page.resolve()}"
    assert json.loads(out)  # stdout stays the report
