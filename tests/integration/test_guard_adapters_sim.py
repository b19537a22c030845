"""The guard's real adapters (lightkube reader and node writer) against the simulator's API
over HTTP: one patch cordons and annotates, a stale read gets 409, an Event is recorded."""

from __future__ import annotations

import lightkube
import pytest

from gpuguard.actuators import nodes
from gpuguard.errors import ConflictError
from gpuguard.model import annotation_keys
from gpuguard.sources import kubernetes
from tests.conftest import SimApi
from tests.integration.simnodes import NOW, isolate_action, seed_node

pytestmark = pytest.mark.integration

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
