"""Forged isolation marks are never returned to the pool: the simulator's API server records
``managedFields`` per field manager as the real one does, gpuguard's reader takes the writer of
``gpuguard.io/isolated-at`` from them, and the return step refuses marks gpuguard did not write
(a human cordon plus forged isolated-at, verdict and uuid, the review's attack)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import lightkube
import pytest
from lightkube.resources.core_v1 import Node

from gpuguard.actuators import nodes
from gpuguard.model import annotation_keys as keys
from gpuguard.model import decisions
from gpuguard.model import return_to_pool as return_model
from gpuguard.policy import return_to_pool
from gpuguard.sources import kubernetes
from tests import return_builders as returns
from tests.conftest import SimApi
from tests.integration.simnodes import NOW, isolate_action, seed_node

pytestmark = pytest.mark.integration


def read(api: SimApi) -> kubernetes.fleet.Node:
    with lightkube.Client(config=api.config()) as client:
        (node,) = kubernetes.KubernetesReader(client).nodes()
    return node


def decide(node: kubernetes.fleet.Node) -> return_model.ReturnDecision:
    """The return step with every condition met (rebooted, burn-in passed) but the marks'
    writer, which comes from the API server."""
    met = dataclasses.replace(returns.node(), isolation_writers=node.isolation_writers)
    return return_to_pool.decide(met, returns.facts(), returns.GUARD, returns.NOW)


def test_marks_written_by_gpuguard_are_its_own(sim_api: SimApi) -> None:
    seed_node(sim_api, "gpu-node-b")
    with lightkube.Client(config=sim_api.config(), field_manager=keys.FIELD_MANAGER) as client:
        nodes.NodeWriter(client).isolate(read(sim_api), isolate_action("gpu-node-b"))
    node = read(sim_api)
    assert node.isolation_writers == {keys.FIELD_MANAGER}
    assert decide(node).reason is decisions.Reason.BURN_IN_PASSED


def test_a_human_cordon_with_forged_marks_is_never_returned(sim_api: SimApi) -> None:
    seed_node(sim_api, "gpu-node-b")
    forged = {keys.ISOLATED_AT: (NOW - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
              keys.VERDICT: "power-cycle", keys.GPU_UUID: "GPU-1a2b", keys.REASON: "xid-79"}
    with lightkube.Client(config=sim_api.config(), field_manager="kubectl-annotate") as client:
        client.patch(Node, "gpu-node-b", {"spec": {"unschedulable": True},
                                         "metadata": {"annotations": forged}})
    node = read(sim_api)
    assert node.isolation_writers == {"kubectl-annotate"}
    decision = decide(node)
    assert decision.step is return_model.ReturnStep.NONE
    assert decision.reason is decisions.Reason.MARKS_NOT_GPUGUARDS
    assert decision.action is None
    assert "written by kubectl-annotate" in decision.detail


def test_a_person_overwriting_gpuguards_mark_takes_it_over(sim_api: SimApi) -> None:
    """Ownership moves with the value (an Update operation that changes a field owns it)."""
    seed_node(sim_api, "gpu-node-b")
    with lightkube.Client(config=sim_api.config(), field_manager=keys.FIELD_MANAGER) as client:
        nodes.NodeWriter(client).isolate(read(sim_api), isolate_action("gpu-node-b"))
    with lightkube.Client(config=sim_api.config(), field_manager="kubectl-annotate") as client:
        client.patch(Node, "gpu-node-b", {"metadata": {"annotations": {keys.ISOLATED_AT: "x"}}})
    assert read(sim_api).isolation_writers == {"kubectl-annotate"}
    stored = sim_api.store.get("Node", "", "gpu-node-b")
    managers = {e["manager"] for e in stored["metadata"]["managedFields"]}
    assert managers == {keys.FIELD_MANAGER, "kubectl-annotate"}, "gpuguard keeps its other marks"
