"""Dynamic Resource Allocation in the simulator, kept small: what NVIDIA's DRA driver
publishes, and how the scheduler allocates devices around DeviceTaintRules.

- **The driver** (NVIDIA k8s-dra-driver-gpu) publishes, per node, a ResourceSlice of driver
  ``gpu.nvidia.com`` whose pool is named after the node, one device per GPU named ``gpu-N``
  with a ``uuid`` string attribute. A republished slice may name devices differently
  (``first_name`` shifts the numbers: the rule that selected ``gpu-1`` no longer does).
- **The scheduler** allocates a claim's devices from the node's slices, skipping a device a
  DeviceTaintRule taints with ``NoSchedule`` or ``NoExecute`` unless the request tolerates
  it (https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/
  #device-taints-and-tolerations; KEP-5055). Modelled: the rule's ``deviceSelector`` (driver,
  pool, device; each set one must match) and tolerations by key (``Exists``, or ``Equal`` with
  the value) and effect. Not modelled: CEL selectors, eviction of running claims by
  ``NoExecute``, claims across nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpuguard.sim import state, store

DRIVER = "gpu.nvidia.com"
TAINTING = ("NoSchedule", "NoExecute")


def slice_name(node: str) -> str:
    return f"{node}-{DRIVER}"


def resource_slice(node: state.SimNode, *, first_name: int = 0, generation: int = 1) -> store.Obj:
    """The slice the driver publishes for ``node``'s GPUs on the bus and attached."""
    devices = [
        {"name": f"gpu-{first_name + g.index}",
         "attributes": {"uuid": {"string": g.uuid}, "index": {"int": g.index}}}
        for g in node.gpus if g.on_bus and g.uuid not in node.nvreg_active
    ]
    return {
        "metadata": {"name": slice_name(node.name)},
        "spec": {"driver": DRIVER, "nodeName": node.name,
                 "pool": {"name": node.name, "generation": generation, "resourceSliceCount": 1},
                 "devices": devices},
    }


def publish(objects: store.ObjectStore, node: state.SimNode, *, first_name: int = 0) -> None:
    """Create the node's slice, or republish it (a new pool generation)."""
    name = slice_name(node.name)
    try:
        current = objects.get("ResourceSlice", "", name)
    except store.StoreNotFound:
        objects.create("ResourceSlice", "", resource_slice(node, first_name=first_name))
        return
    generation = int(current["spec"]["pool"]["generation"]) + 1
    body = resource_slice(node, first_name=first_name, generation=generation)
    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    objects.replace("ResourceSlice", "", name, body)


def allocate(
    objects: store.ObjectStore, node: str, count: int,
    tolerations: Iterable[Mapping[str, str]] = (),
) -> tuple[str, ...] | None:
    """The UUIDs of ``count`` devices a claim gets on ``node``; None when fewer are free of
    untolerated taints."""
    rules = objects.list("DeviceTaintRule")
    tolerated = tuple(tolerations)
    free = [
        (str(d["name"]), str(d["attributes"]["uuid"]["string"]))
        for s in objects.list("ResourceSlice")
        if s["spec"].get("nodeName") == node and s["spec"].get("driver") == DRIVER
        for d in s["spec"].get("devices") or ()
        if not any(_taints(r, s["spec"], d, tolerated) for r in rules)
    ]
    return tuple(uuid for _, uuid in sorted(free)[:count]) if len(free) >= count else None


def _taints(
    rule: store.Obj, slice_spec: Mapping[str, Any], device: Mapping[str, Any],
    tolerations: tuple[Mapping[str, str], ...],
) -> bool:
    spec = rule.get("spec") or {}
    selector = spec.get("deviceSelector") or {}
    actual = {"driver": slice_spec.get("driver"), "pool": slice_spec["pool"]["name"],
              "device": device.get("name")}
    if any(selector.get(k) not in (None, v) for k, v in actual.items()):
        return False
    taint = spec.get("taint") or {}
    return taint.get("effect") in TAINTING and not any(_tolerates(t, taint) for t in tolerations)


def _tolerates(toleration: Mapping[str, str], taint: Mapping[str, Any]) -> bool:
    if toleration.get("effect") not in (None, "", taint.get("effect")):
        return False
    if toleration.get("key") not in (None, "", taint.get("key")):
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return toleration.get("value") == taint.get("value")
