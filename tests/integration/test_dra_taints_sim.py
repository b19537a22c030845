"""The DRA route applied against the simulator over real HTTP: gpuguard's DeviceTaintRule
keeps the simulated scheduler from allocating the isolated GPU, follows the device when the
driver republishes its slice under new names (resolved by UUID), and is deleted when the GPU
returns (docs/gpu-isolation.md#dra)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import lightkube
import pytest

from gpuguard.actuators import dra
from gpuguard.controller import dra_taints
from gpuguard.model import annotation_keys, decisions, fleet, gpu_isolation
from gpuguard.policy import gpu_route
from gpuguard.sim import clock, scenario, store, world
from gpuguard.sim import dra as sim_dra
from tests.conftest import ServeStore
from tests.fakes import FakeWriter

pytestmark = pytest.mark.integration
NOW = datetime(2026, 8, 10, 16, 0, tzinfo=UTC)
SPEC = {"name": "dra", "dra": True, "start": "2026-08-10T00:00:00Z",
        "fleet": {"nodes": ["gpu-node-a"], "gpus_per_node": 4,
                  "model": "NVIDIA RTX PRO 6000 Blackwell Server Edition"}}


@pytest.fixture
def cluster(serve_store: ServeStore) -> Iterator[tuple[world.World, dra_taints.DraTaints,
                                                       FakeWriter]]:
    spec = scenario.from_mapping(SPEC)
    played = world.World.from_scenario(spec, store.ObjectStore(), clock.SimClock(spec.start))
    api = serve_store(played.store)
    writer = FakeWriter()
    with lightkube.Client(config=api.config()) as client:
        yield played, dra_taints.DraTaints(dra.DeviceTaints(client), writer), writer


def node(played: world.World, *, isolated: bool) -> fleet.Node:
    gpu = played.node("gpu-node-a").gpus[1]
    entry = gpu_isolation.IsolatedGpu(gpu.uuid, gpu.pci, "1", NOW, "xid-48", capacity=4)
    marks = gpu_isolation.to_annotation((entry,)) if isolated else None
    annotations = {annotation_keys.GPU_ISOLATED: marks} if marks else {}
    return fleet.Node("gpu-node-a", "boot-1", 4, 4, annotations=annotations)


def tick(played: world.World, step: dra_taints.DraTaints, *, isolated: bool) -> list[str]:
    snapshot = fleet.FleetSnapshot(NOW, nodes=(node(played, isolated=isolated),))
    return [t.detail for t in step.run(snapshot, may_write=lambda: True)]


def rules(played: world.World) -> list[store.Obj]:
    return played.store.list("DeviceTaintRule")


def test_the_taint_keeps_claims_off_the_gpu_follows_a_renamed_device_and_goes_on_return(
    cluster: tuple[world.World, dra_taints.DraTaints, FakeWriter],
) -> None:
    played, step, writer = cluster
    bad = played.node("gpu-node-a").gpus[1].uuid
    assert sim_dra.allocate(played.store, "gpu-node-a", 4) is not None

    (applied,) = tick(played, step, isolated=True)
    (rule,) = rules(played)
    assert rule["spec"]["deviceSelector"] == {"driver": "gpu.nvidia.com", "pool": "gpu-node-a",
                                              "device": "gpu-1"}
    assert rule["spec"]["taint"]["effect"] == "NoSchedule"
    assert "gpu-node-a/gpu-1" in applied
    assert sim_dra.allocate(played.store, "gpu-node-a", 4) is None
    three = sim_dra.allocate(played.store, "gpu-node-a", 3)
    assert three is not None
    assert bad not in three
    assert tick(played, step, isolated=True) == []  # verified and unchanged: no write

    sim_dra.publish(played.store, played.node("gpu-node-a"), first_name=4)  # gpu-1 -> gpu-5
    (moved,) = tick(played, step, isolated=True)
    assert "taint moved to gpu.nvidia.com/gpu-node-a/gpu-5" in moved
    (rule,) = rules(played)
    assert rule["spec"]["deviceSelector"]["device"] == "gpu-5"
    again = sim_dra.allocate(played.store, "gpu-node-a", 3)
    assert again is not None
    assert bad not in again

    (removed,) = tick(played, step, isolated=False)
    assert "removed" in removed
    assert rules(played) == []
    assert sim_dra.allocate(played.store, "gpu-node-a", 4) is not None
    assert [e.reason for e in writer.events] == [
        decisions.Reason.GPU_DRA_TAINTED, decisions.Reason.GPU_DRA_TAINTED,
        decisions.Reason.GPU_DRA_UNTAINTED,
    ]


def test_a_toleration_lets_a_claim_use_the_tainted_device(
    cluster: tuple[world.World, dra_taints.DraTaints, FakeWriter],
) -> None:
    played, step, _ = cluster
    tick(played, step, isolated=True)
    tolerate = {"key": "gpuguard.io/gpu-isolated", "operator": "Exists"}
    assert sim_dra.allocate(played.store, "gpu-node-a", 4, [tolerate]) is not None


V1 = "resource.k8s.io/v1/devicetaintrules"
BETA = "resource.k8s.io/v1beta2/devicetaintrules"


def test_a_cluster_that_does_not_serve_device_taint_rules_gets_none(
    serve_store: ServeStore,
) -> None:
    """Slices published, but neither v1 nor v1beta2 rules are served: nothing written."""
    spec = scenario.from_mapping(SPEC)
    played = world.World.from_scenario(spec, store.ObjectStore(), clock.SimClock(spec.start))
    api = serve_store(played.store)
    api.server.withheld = frozenset({V1, BETA})
    with lightkube.Client(config=api.config()) as client:
        step = dra_taints.DraTaints(dra.DeviceTaints(client), FakeWriter())
        assert tick(played, step, isolated=True) == []
    assert rules(played) == []


def test_a_1_36_cluster_gets_the_same_rule_through_the_beta_api(
    serve_store: ServeStore,
) -> None:
    """Kubernetes 1.36 serves DeviceTaintRules only as v1beta2 (behind DRADeviceTaintRules):
    the same reconcile taints, verifies and removes the rule there, asking v1 only once."""
    spec = scenario.from_mapping(SPEC)
    played = world.World.from_scenario(spec, store.ObjectStore(), clock.SimClock(spec.start))
    api = serve_store(played.store)
    api.server.withheld = frozenset({V1})
    with lightkube.Client(config=api.config()) as client:
        taints = dra.DeviceTaints(client)
        step = dra_taints.DraTaints(taints, FakeWriter())
        (applied,) = tick(played, step, isolated=True)
        assert "gpu-node-a/gpu-1" in applied
        assert taints.served == "resource.k8s.io/v1beta2"
        assert sim_dra.allocate(played.store, "gpu-node-a", 4) is None
        assert tick(played, step, isolated=True) == []  # read back through v1beta2: verified
        (removed,) = tick(played, step, isolated=False)
        assert "removed" in removed
    assert rules(played) == []
    paths = [(r.method, r.path) for r in api.server.requests if "devicetaintrules" in r.path]
    assert [p for _, p in paths if p.startswith("/apis/resource.k8s.io/v1/")] == [
        "/apis/resource.k8s.io/v1/devicetaintrules"]
    assert {m for m, p in paths if "/v1beta2/" in p} == {"GET", "POST", "DELETE"}


def test_the_beta_api_is_the_controllers_fallback_in_the_order_the_policy_names() -> None:
    assert tuple(dra.api_version(k) for k in dra.KINDS) == gpu_route.API_VERSIONS
