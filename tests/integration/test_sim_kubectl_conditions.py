"""``kubectl`` sets and shows a node condition against the simulated API server as on a real
cluster: a strategic merge patch of ``nodes/NAME/status`` adds the condition beside the
kubelet's, and ``kubectl describe node`` lists both (what an operator runs to see why gpuguard
acted, docs/design.md#fast-path)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests import tools
from tests.conftest import SimApi

pytestmark = pytest.mark.integration

WHEN = "2026-01-01T00:00:00Z"
READY = {"type": "Ready", "status": "True", "reason": "KubeletReady",
         "lastHeartbeatTime": WHEN, "lastTransitionTime": WHEN}
GONE = {"type": "GpuFallenOffBus", "status": "True", "reason": "GpuGoneFromBus",
        "message": "gpu=3 pci=0000:3b:00.0 xid=79; fell off the bus",
        "lastHeartbeatTime": WHEN, "lastTransitionTime": WHEN}


def kubectl(sim_api: SimApi, *args: str) -> str:
    argv = [tools.require("kubectl"), "--server", sim_api.url, *args]
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30).stdout


def test_kubectl_describe_node_shows_a_condition_set_by_a_strategic_status_patch(
    sim_api: SimApi,
) -> None:
    sim_api.store.create("Node", "", {"metadata": {"name": "gpu-1"}, "spec": {},
                                      "status": {"conditions": [READY]}})

    kubectl(sim_api, "patch", "node", "gpu-1", "--subresource=status", "--type=strategic",
            "-p", json.dumps({"status": {"conditions": [GONE]}}))
    described = kubectl(sim_api, "describe", "node", "gpu-1")

    rows = [line.split() for line in described.splitlines()]
    assert next(r[:2] for r in rows if r[:1] == ["Ready"]) == ["Ready", "True"]
    gone = next(r for r in rows if r[:1] == ["GpuFallenOffBus"])
    assert gone[1] == "True"
    assert "GpuGoneFromBus" in gone
    assert "gpu=3 pci=0000:3b:00.0 xid=79; fell off the bus" in described
    patch = next(r for r in sim_api.server.requests if r.method == "PATCH")
    assert patch.content_type == "application/strategic-merge-patch+json"
