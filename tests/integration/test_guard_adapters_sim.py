"""The guard's real adapters (lightkube reader and node writer) against the simulator's API
over HTTP: one patch cordons and annotates, a stale read gets 409, an Event is recorded."""

from __future__ import annotations

from datetime import UTC, datetime

import lightkube
import pytest

from gpuguard.actuators import nodes
from gpuguard.errors import ConflictError
from gpuguard.model import annotation_keys, decisions
from gpuguard.sources import kubernetes
from tests.conftest import SimApi

pytestmark = pytest.mark.integration
NOW = datetime(2026, 9, 21, 6, 5, 10, tzinfo=UTC)


def node_info(name: str) -> dict[str, str]:
    """Every field the real API returns (lightkube decodes strictly)."""
    return {
        "architecture": "amd64",
        "bootID": f"boot-{name}",
        "containerRuntimeVersion": "containerd://1.7.23-k3s2",
        "kernelVersion": "6.8.0-45-generic",
        "kubeProxyVersion": "v1.31.4+rke2r1",
        "kubeletVersion": "v1.31.4+rke2r1",
        "machineID": "m",
        "operatingSystem": "linux",
        "osImage": "Ubuntu 24.04.1 LTS",
        "systemUUID": "s",
    }


def seed_node(api: SimApi, name: str, allocatable: str = "8") -> None:
    api.store.create(
        "Node",
        "",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true"}},
            "spec": {},
            "status": {
                "capacity": {"nvidia.com/gpu": "8"},
                "allocatable": {"nvidia.com/gpu": allocatable},
                "nodeInfo": node_info(name),
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )


def isolate_action(name: str) -> decisions.Action:
    return decisions.Action(
        kind=decisions.ActionKind.ISOLATE,
        node=name,
        reason=decisions.Reason.FAST_PATH,
        evidence=(decisions.Evidence("DCGM_FI_DEV_XID_ERRORS{gpu=4}", "79", NOW),),
        annotations={annotation_keys.REASON: "xid-79", annotation_keys.ISOLATED_AT: "t"},
        detail="xid-79 on GPU 4",
    )


def test_reader_sees_gpu_loss_boot_id_and_conditions(sim_api: SimApi) -> None:
    seed_node(sim_api, "gpu-node-b", allocatable="7")
    with lightkube.Client(config=sim_api.config()) as client:
        (node,) = kubernetes.KubernetesReader(client).nodes()
    assert (node.gpu_capacity, node.gpu_allocatable, node.boot_id) == (8, 7, "boot-gpu-node-b")
    assert node.ready
    assert node.resource_version


def test_one_patch_cordons_and_annotates_and_an_event_is_recorded(sim_api: SimApi) -> None:
    seed_node(sim_api, "gpu-node-b", allocatable="7")
    with lightkube.Client(config=sim_api.config()) as client:
        (node,) = kubernetes.KubernetesReader(client).nodes()
        writer = nodes.NodeWriter(client)
        writer.isolate(node, isolate_action("gpu-node-b"))
        writer.record_event(isolate_action("gpu-node-b"), NOW)
    stored = sim_api.store.get("Node", "", "gpu-node-b")
    assert stored["spec"]["unschedulable"] is True
    assert stored["metadata"]["annotations"][annotation_keys.REASON] == "xid-79"
    patches = [r for r in sim_api.server.requests if r.method == "PATCH"]
    assert len(patches) == 1
    (event,) = sim_api.store.list("Event", "default")
    assert event["involvedObject"]["name"] == "gpu-node-b"
    assert event["reason"] == "FastPath"
    assert "79" in event["message"]


def test_a_stale_read_gets_a_conflict_and_changes_nothing(sim_api: SimApi) -> None:
    seed_node(sim_api, "gpu-node-b", allocatable="7")
    with lightkube.Client(config=sim_api.config()) as client:
        (node,) = kubernetes.KubernetesReader(client).nodes()
        sim_api.store.merge_patch("Node", "", "gpu-node-b", {"spec": {"unschedulable": True}})
        with pytest.raises(ConflictError):
            nodes.NodeWriter(client).isolate(node, isolate_action("gpu-node-b"))
    stored = sim_api.store.get("Node", "", "gpu-node-b")
    assert annotation_keys.REASON not in stored["metadata"].get("annotations", {})
