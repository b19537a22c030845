"""gpuguard with its real identity against the real API server: tokens bound to gpuguard's
own pods (TokenRequest, as their kubelets request them), through the chart's RBAC and every
admission policy.

The fleet is the simulator's (``xid79-twice``: GPU 4 of gpu-node-b falls off the bus): its
exporters scraped by a real Prometheus, its Nodes registered in the real API as their kubelets
would register them. One ``gpuguard once`` must cordon gpu-node-b and start its evidence Job,
which the real Job controller turns into a pod (as its own service account, through the
policies) pinned to gpu-node-b; gpu-node-a is left alone.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import lightkube
import pytest

from gpuguard.agent import node_status
from gpuguard.model import node_conditions as nc
from gpuguard.sim import clock, live, metrics_server, scenario, store, world
from gpuguard.sim.control_plane import chart, cluster
from tests import tools, waits
from tests.realcluster import helm, nodes

FAULT_AT = timedelta(minutes=3, seconds=59)  # xid79-twice's first Xid 79


@pytest.fixture(scope="module")
def fleet() -> world.World:
    """xid79-twice just after its first fault, its clock at the wall clock's now."""
    spec = scenario.load_shipped("xid79-twice")
    began = datetime.now(UTC).replace(microsecond=0) - FAULT_AT - timedelta(seconds=5)
    spec = dataclasses.replace(spec, start=began)
    played = world.World.from_scenario(spec, store.ObjectStore(), clock.SimClock(began))
    played.step_to(FAULT_AT + timedelta(seconds=5))
    return played


@pytest.fixture(scope="module")
def prometheus(fleet: world.World, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tools.require("prometheus")
    with metrics_server.serve(fleet) as exporters:
        config: dict[str, Any] = {"global": {"scrape_interval": "1s"}}
        config |= metrics_server.scrape_config(exporters.url, fleet.nodes)
        with live.prometheus(config, tmp_path_factory.mktemp("prometheus"), "127.0.0.1") as url:
            yield url


def test_the_controllers_own_token_isolates_the_faulty_node_through_the_policies(
    installed: cluster.ControlPlane, fleet: world.World, prometheus: str
) -> None:
    names = [n.name for n in fleet.nodes]
    # The NVIDIA runtime's RuntimeClass, as the GPU Operator installs it: gpuguard's Jobs run
    # with it, and the RuntimeClass admission plugin refuses a pod naming one that is absent.
    installed.request(
        "POST",
        "/apis/node.k8s.io/v1/runtimeclasses",
        {"metadata": {"name": "nvidia"}, "handler": "nvidia"},
    )
    with nodes.registered(installed, names, objects=fleet.store.list("Node")):
        assert waits.eventually(lambda: _scraped(prometheus, len(names)), timeout_s=30)
        # gpuguard's token is bound to one of its controller pods (made by the ReplicaSet,
        # placed by the scheduler), as the kubelet that runs it would request it.
        config, _ = chart.pod_bound_kubeconfig(
            installed, "gpuguard", "controller", installed.folder / "gpuguard.kubeconfig"
        )
        outputs = [_once(config, prometheus)]  # the tick that isolates
        node_b = _get(installed, "node", "gpu-node-b")
        assert node_b["spec"].get("unschedulable") is True, outputs
        outputs.append(_once(config, prometheus))  # the next starts the evidence Job

        assert any(k.startswith("gpuguard.io/") for k in node_b["metadata"]["annotations"])
        assert not _get(installed, "node", "gpu-node-a")["spec"].get("unschedulable")

        jobs = _items(installed, "jobs", "-n", helm.NAMESPACE)
        evidences = [j for j in jobs if "evidence" in j["metadata"]["name"]]
        assert len(evidences) == 1, str(outputs)[-3000:] + _events(installed)
        (evidence,) = evidences
        assert evidence["spec"]["template"]["spec"]["nodeName"] == "gpu-node-b"

        def its_pod() -> bool:
            pods = _items(
                installed,
                "pods",
                "-n",
                helm.NAMESPACE,
                f"-l=job-name={evidence['metadata']['name']}",
            )
            return [p["spec"]["nodeName"] for p in pods] == ["gpu-node-b"]

        assert waits.eventually(its_pod, timeout_s=30, every_s=0.5), _events(installed)


def _once(config: Path, prometheus: str) -> str:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuguard.cli.main",
            "once",
            "--kubeconfig",
            str(config),
            "--prometheus-url",
            prometheus,
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _scraped(prometheus: str, targets: int) -> bool:
    import urllib.request

    with urllib.request.urlopen(f"{prometheus}/api/v1/query?query=up", timeout=2) as answer:
        result = json.loads(answer.read())["data"]["result"]
    return len(result) > targets and all(r["value"][1] == "1" for r in result)


def _get(plane: cluster.ControlPlane, kind: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(plane.kubectl("get", kind, name, "-o", "json").stdout)
    return found


def _items(plane: cluster.ControlPlane, *args: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(plane.kubectl("get", *args, "-o", "json").stdout)[
        "items"
    ]
    return items


def _events(plane: cluster.ControlPlane) -> str:
    listed = _items(plane, "events", "-n", helm.NAMESPACE)
    return "; ".join(f"{e['reason']}: {e['message']}" for e in listed[-5:])


def test_the_agents_pod_bound_token_writes_its_own_nodes_conditions_and_no_other(
    installed: cluster.ControlPlane,
) -> None:
    """The agent's token is bound to the pod the DaemonSet controller made on gpu-node-b
    (requested as that node's kubelet requests it), so the API server puts the node in it
    (``authentication.kubernetes.io/node-name``): its condition patch (the agent's own
    writer) lands on gpu-node-b and is refused on gpu-node-a by gpuguard-node-conditions; the
    agent's requests impersonate nothing."""
    with nodes.registered(installed, ["gpu-node-a", "gpu-node-b"]):

        def agent_pod() -> dict[str, Any] | None:
            pods = _items(
                installed,
                "pods",
                "-n",
                helm.NAMESPACE,
                "-l=app.kubernetes.io/component=agent",
                "--field-selector=spec.nodeName=gpu-node-b",
            )
            return pods[0] if pods else None

        assert waits.eventually(lambda: agent_pod() is not None, timeout_s=60, every_s=0.5)
        pod = agent_pod()
        assert pod is not None
        token = installed.pod_bound_token(helm.NAMESPACE, "gpuguard-agent", pod, seconds=600)
        config = installed.write_kubeconfig(installed.folder / "agent.kubeconfig", token, "agent")
        gone = nc.GpuCondition(
            nc.GPU_FALLEN_OFF_BUS,
            "True",
            nc.GONE_FROM_BUS,
            "gpu=4 pci=0000:99:00.0 xid=79; GPU has fallen off the bus",
            datetime.now(UTC).replace(microsecond=0),
        )
        patch = node_status.body({gone.type: gone}, time.time())
        with lightkube.Client(config=lightkube.KubeConfig.from_file(config)) as client:
            node_status.lightkube_patch(client, "gpu-node-b")(patch)
            with pytest.raises(node_status.ConditionWriteError, match="gpuguard-node-conditions"):
                node_status.lightkube_patch(client, "gpu-node-a")(patch)
        conditions = _get(installed, "node", "gpu-node-b")["status"]["conditions"]
        assert {(c["type"], c["reason"]) for c in conditions} >= {
            (nc.GPU_FALLEN_OFF_BUS, nc.GONE_FROM_BUS),
            ("Ready", "KubeletReady"),
        }
