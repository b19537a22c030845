"""The cluster type that decides how an isolated GPU is kept out, and the DRA route's
DeviceTaintRule: resolved from the ResourceSlice device whose uuid attribute is the card's,
valid for the API versions that serve it (kubernetes-validate's bundled schemas)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from typer.testing import CliRunner

from gpuguard.cli.main import app
from gpuguard.model import fleet, gpu_isolation
from gpuguard.policy import gpu_route

BAD = "GPU-0a8e0faa-d59d-595d-bf96-0adbb520ef6b"


def resource_slice(node: str, uuids: list[str], *, beta1: bool = False) -> dict[str, Any]:
    """A ResourceSlice as NVIDIA's DRA driver publishes it: pool = node, devices gpu-N."""
    def device(i: int, uuid: str) -> dict[str, Any]:
        attributes = {"uuid": {"string": uuid}, "index": {"int": i}}
        return {"name": f"gpu-{i}", **({"basic": {"attributes": attributes}} if beta1
                                       else {"attributes": attributes})}

    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-gpu.nvidia.com-x"},
            "spec": {"driver": gpu_route.DRA_DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [device(i, u) for i, u in enumerate(uuids)]}}


SLICES = [resource_slice("gpu-node-a", ["GPU-aaaa", BAD, "GPU-cccc"]),
          resource_slice("gpu-node-b", ["GPU-dddd"], beta1=True),
          {"spec": "garbage"}, {"kind": "ResourceSlice"}]


def node(labels: dict[str, str] | None = None, name: str = "gpu-node-a") -> fleet.Node:
    return fleet.Node(name, "boot", 4, 4, labels=labels or {})


@pytest.mark.parametrize(("labels", "slices", "expected"), [
    ({}, SLICES, gpu_route.Route.DRA),
    ({"nvidia.com/gpu.deploy.device-plugin": "true"}, [], gpu_route.Route.GPU_OPERATOR),
    ({"nvidia.com/gpu.present": "true"}, [], gpu_route.Route.DEVICE_PLUGIN),
], ids=["dra-slices", "operator-labels", "host-drivers"])
def test_the_route_follows_the_cluster_type(
    labels: dict[str, str], slices: list[dict[str, Any]], expected: gpu_route.Route
) -> None:
    found = gpu_route.route(node(labels), gpu_route.slice_devices(slices))
    assert found.route is expected
    assert found.why


def test_the_device_is_resolved_by_its_uuid_attribute_in_every_version() -> None:
    devices = gpu_route.slice_devices(SLICES)
    found = gpu_route.resolve(devices, "gpu-node-a", BAD)
    assert found is not None
    assert (found.driver, found.pool, found.device) == (gpu_route.DRA_DRIVER, "gpu-node-a",
                                                        "gpu-1")
    beta1 = gpu_route.resolve(devices, "gpu-node-b", "GPU-dddd")
    assert beta1 is not None
    assert beta1.device == "gpu-0"
    assert gpu_route.resolve(devices, "gpu-node-b", BAD) is None  # another node's card


@pytest.mark.parametrize(("api_version", "kube"), [
    ("resource.k8s.io/v1", "1.37.0"), ("resource.k8s.io/v1beta2", "1.36.0")])
@pytest.mark.parametrize("effect", list(gpu_route.Effect))
def test_the_taint_rule_is_valid_for_the_api_that_serves_it(
    api_version: str, kube: str, effect: gpu_route.Effect
) -> None:
    device = gpu_route.resolve(gpu_route.slice_devices(SLICES), "gpu-node-a", BAD)
    assert device is not None
    rule = gpu_route.taint_rule(device, effect=effect, api_version=api_version,
                                at=datetime(2026, 8, 10, tzinfo=UTC))
    kubernetes_validate.validate(rule, kube, strict=True)
    assert rule["spec"]["deviceSelector"] == {"driver": "gpu.nvidia.com", "pool": "gpu-node-a",
                                              "device": "gpu-1"}
    assert rule["spec"]["taint"]["effect"] == str(effect)


def test_the_cli_prints_the_rule_from_saved_slices(tmp_path: Path) -> None:
    saved = tmp_path / "slices.json"
    saved.write_text(json.dumps({"items": SLICES}))
    args = ["gpu-isolate", "taint-rule", "--node", "gpu-node-a", "--uuid", BAD,
            "--slices", str(saved), "-o", "json"]
    printed = CliRunner().invoke(app, args)
    assert printed.exit_code == 0, printed.output
    assert json.loads(printed.output)["spec"]["deviceSelector"]["device"] == "gpu-1"
    missing = CliRunner().invoke(app, [*args[:5], "GPU-none", *args[6:]])
    assert missing.exit_code != 0
    assert "no gpu.nvidia.com device with uuid GPU-none" in missing.output


def isolated(uuid: str = BAD) -> fleet.Node:
    entry = gpu_isolation.IsolatedGpu(uuid, "0000:2a:00.0", "1", datetime(2026, 8, 10, tzinfo=UTC),
                                      "xid-48", capacity=4)
    value = gpu_isolation.to_annotation((entry,)) or ""
    return fleet.Node("gpu-node-a", "boot", 4, 4, annotations={gpu_isolation.KEY: value})


def test_reconcile_taints_the_isolated_gpu_then_follows_its_uuid_then_removes_the_rule() -> None:
    devices = gpu_route.slice_devices(SLICES)
    (create,) = gpu_route.reconcile([isolated()], devices, [])
    assert create.current is None
    assert create.rule is not None
    assert create.rule["spec"]["deviceSelector"]["device"] == "gpu-1"
    assert gpu_route.reconcile([isolated()], devices, [create.rule]) == ()

    renamed = gpu_route.slice_devices([resource_slice("gpu-node-a", [BAD, "GPU-aaaa"])])
    (update,) = gpu_route.reconcile([isolated()], renamed, [create.rule])
    assert update.current == create.rule
    assert update.rule is not None
    assert update.rule["spec"]["deviceSelector"]["device"] == "gpu-0"

    unpublished = gpu_route.slice_devices([resource_slice("gpu-node-a", ["GPU-aaaa"])])
    assert gpu_route.reconcile([isolated()], unpublished, [create.rule]) == ()

    (delete,) = gpu_route.reconcile([node()], devices, [create.rule])
    assert delete.rule is None
    assert delete.name == create.name
    assert delete.node == "gpu-node-a"
