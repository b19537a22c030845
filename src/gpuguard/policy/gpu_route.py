"""Which route keeps an isolated GPU out on a node's cluster type, and the DRA route's
``DeviceTaintRule`` (docs/gpu-isolation.md#cluster-types). Pure: no I/O, no clock.

- **DRA**: the node publishes ResourceSlices of NVIDIA's DRA driver (``gpu.nvidia.com``). A
  ``DeviceTaintRule`` taints the device whose ``uuid`` attribute is the card's: ``NoSchedule``
  keeps new claims off it, ``NoExecute`` also evicts the pods using it (KEP-5055; GA in
  Kubernetes 1.37, beta behind ``DRADeviceTaintRules`` in 1.36 with ``v1beta2``). Rules select
  by driver, pool and device *name*, so the name is resolved again from the slices at every
  reconcile (NVIDIA's driver names devices ``gpu-N``; a renumbering moves the name).
  ``reconcile`` compares the rules gpuguard wants (one per isolated GPU its node's slices
  publish) with the ones that exist: create, update (a device renamed), delete (the GPU
  returned).
- **GPU Operator**: the operator labels the GPU nodes it manages ``nvidia.com/gpu.deploy.*``
  (its operands' switches); its device plugin runs privileged and sees every GPU (gpu-operator
  issue #1388), so gpuguard switches it off on the node with its operand label
  ``nvidia.com/gpu.deploy.device-plugin=false`` and the chart's per-node plugin serves the
  other GPUs, as on the host-driver route.
- **device plugin with host drivers**: otherwise; the route gpuguard builds (compute mode
  PROHIBITED + the chart's per-node plugin).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from gpuguard.model import fleet, gpu_isolation, timestamps

DRA_DRIVER = gpu_isolation.DRA_DRIVER
OPERATOR_LABEL_PREFIX = "nvidia.com/gpu.deploy."
TAINT_KEY = "gpuguard.io/gpu-isolated"
API_VERSIONS = ("resource.k8s.io/v1", "resource.k8s.io/v1beta2")  # GA (1.37), beta (1.36)


class Route(StrEnum):
    DEVICE_PLUGIN = "device-plugin"
    GPU_OPERATOR = "gpu-operator"
    DRA = "dra"


class Effect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    NO_EXECUTE = "NoExecute"


@dataclass(frozen=True, slots=True)
class SliceDevice:
    """One device of a ResourceSlice: what a DeviceTaintRule selects it by, and its UUID."""

    driver: str
    pool: str
    device: str
    node: str
    uuid: str


@dataclass(frozen=True, slots=True)
class RouteDecision:
    route: Route
    why: str
    built: str  # what gpuguard does on this route


def route(node: fleet.Node, devices: Iterable[SliceDevice] = ()) -> RouteDecision:
    """The node's cluster type, first match wins: DRA, GPU Operator, host drivers."""
    gpus = [d for d in devices if d.node == node.name and d.driver == DRA_DRIVER]
    if gpus:
        return RouteDecision(
            Route.DRA, f"{len(gpus)} {DRA_DRIVER} devices in its ResourceSlices",
            "compute mode PROHIBITED; a DeviceTaintRule on the device with the card's uuid, "
            "applied and re-resolved every tick where resource.k8s.io/v1 serves it",
        )
    operator = sorted(k for k in node.labels if k.startswith(OPERATOR_LABEL_PREFIX))
    if operator:
        return RouteDecision(
            Route.GPU_OPERATOR, f"GPU Operator labels: {', '.join(operator[:3])}",
            "compute mode PROHIBITED; the operand label nvidia.com/gpu.deploy.device-plugin=false "
            "moves the operator's plugin aside for the chart's per-node plugin without the GPU; "
            "NVreg_ExcludedGpus offered (gpuguard gpu-isolate kernel-module-config)",
        )
    return RouteDecision(
        Route.DEVICE_PLUGIN, "no GPU Operator labels, no NVIDIA DRA devices known",
        "compute mode PROHIBITED and the chart's per-node device plugin without the GPU",
    )


def slice_devices(slices: Iterable[Mapping[str, Any]]) -> tuple[SliceDevice, ...]:
    """The devices of ResourceSlice objects (any served version: ``spec.driver``,
    ``spec.pool.name``, ``spec.nodeName``, ``spec.devices[].name`` and the ``uuid`` string
    attribute); malformed entries are skipped, a device without a UUID too."""
    found = []
    for item in slices:
        spec = item.get("spec")
        if not isinstance(spec, Mapping):
            continue
        pool = spec.get("pool")
        head = (str(spec.get("driver", "")), str(pool.get("name", "")) if isinstance(
            pool, Mapping) else "", str(spec.get("nodeName") or ""))
        devices = spec.get("devices")
        for device in devices if isinstance(devices, list) else ():
            uuid = _uuid(device)
            if uuid and isinstance(device, Mapping) and device.get("name"):
                found.append(SliceDevice(head[0], head[1], str(device["name"]), head[2], uuid))
    return tuple(found)


def _uuid(device: object) -> str:
    if not isinstance(device, Mapping):
        return ""
    # v1beta1 nests attributes under ``basic``; v1beta2 and v1 have them on the device
    basic = device.get("basic")
    attributes = device.get("attributes") or (
        basic.get("attributes") if isinstance(basic, Mapping) else None)
    value = attributes.get("uuid") if isinstance(attributes, Mapping) else None
    text = value.get("string") if isinstance(value, Mapping) else None
    return str(text) if text else ""


def resolve(devices: Iterable[SliceDevice], node: str, uuid: str) -> SliceDevice | None:
    """The node's NVIDIA DRA device with that UUID now (None: not published)."""
    return next(
        (d for d in devices if d.node == node and d.driver == DRA_DRIVER and d.uuid == uuid),
        None,
    )


def rule_name(node: str, uuid: str) -> str:
    """A DNS subdomain per node and card (at most 253 characters)."""
    return f"gpuguard-{node}-{uuid.lower()}"[:253].rstrip(".-")


def taint_rule(
    device: SliceDevice,
    *,
    effect: Effect = Effect.NO_SCHEDULE,
    at: datetime | None = None,
    api_version: str = API_VERSIONS[0],
) -> dict[str, Any]:
    """The DeviceTaintRule that keeps claims off ``device`` (and, ``NoExecute``, evicts the
    pods using it). ``timeAdded`` is left to the API server unless ``at`` is given."""
    taint: dict[str, Any] = {"key": TAINT_KEY, "value": device.uuid, "effect": str(effect)}
    if at is not None:
        taint["timeAdded"] = timestamps.format_utc(at)
    return {
        "apiVersion": api_version,
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": rule_name(device.node, device.uuid),
            "labels": {"app.kubernetes.io/part-of": "gpuguard"},
        },
        "spec": {
            "deviceSelector": {"driver": device.driver, "pool": device.pool,
                               "device": device.device},
            "taint": taint,
        },
    }


@dataclass(frozen=True, slots=True)
class TaintChange:
    """One write to bring gpuguard's DeviceTaintRules in line: ``rule`` None deletes."""

    node: str
    name: str
    rule: dict[str, Any] | None
    current: dict[str, Any] | None
    detail: str


def reconcile(
    nodes: Iterable[fleet.Node],
    devices: Iterable[SliceDevice],
    rules: Iterable[Mapping[str, Any]],
    effect: Effect = Effect.NO_SCHEDULE,
) -> tuple[TaintChange, ...]:
    """The writes that make one rule per isolated GPU that its node's ResourceSlices publish
    (resolved by UUID now: a renamed device updates the rule), and no rule for a GPU no longer
    isolated. A GPU not published keeps the rule it has (the driver may be republishing)."""
    devices = tuple(devices)
    current = {str(r["metadata"]["name"]): dict(r) for r in rules}
    wanted: set[str] = set()
    changes = []
    for node in nodes:
        for entry in node.marks.gpus:
            name = rule_name(node.name, entry.uuid)
            wanted.add(name)
            device = resolve(devices, node.name, entry.uuid)
            if device is None:
                continue
            rule = taint_rule(device, effect=effect)
            have = current.get(name)
            if have is None or not same_rule(have, rule):
                what = "taint" if have is None else "taint moved to"
                changes.append(TaintChange(
                    node.name, name, rule, have,
                    f"GPU {entry.index} ({entry.uuid}): DeviceTaintRule {name}: {what} "
                    f"{device.driver}/{device.pool}/{device.device} ({effect})"))
    for name, have in sorted(current.items()):
        if name not in wanted:
            pool = str(have.get("spec", {}).get("deviceSelector", {}).get("pool", ""))
            changes.append(TaintChange(pool, name, None, have,
                                       f"DeviceTaintRule {name} removed: the GPU is back"))
    return tuple(changes)


def same_rule(have: Mapping[str, Any], rule: Mapping[str, Any]) -> bool:
    """The same device selected with the same taint (``timeAdded`` is the server's)."""
    def key(r: Mapping[str, Any]) -> tuple[object, ...]:
        spec = r.get("spec") or {}
        taint = spec.get("taint") or {}
        return (spec.get("deviceSelector"), taint.get("key"), taint.get("value"),
                taint.get("effect"))
    return key(have) == key(rule)


MODULE_CONFIG_NAME = "kernel-module-params"
MODULE_CONFIG_NAMESPACE = "gpu-operator"
EXCLUDED_GPUS = "NVreg_ExcludedGpus"


def isolated_uuids(nodes: Iterable[fleet.Node]) -> tuple[str, ...]:
    """Every GPU isolated in the cluster, sorted: one list fits every node, UUIDs are unique."""
    return tuple(sorted({e.uuid for node in nodes for e in node.marks.gpus}))


def kernel_module_config(
    uuids: Iterable[str],
    *,
    existing: str = "",
    name: str = MODULE_CONFIG_NAME,
    namespace: str = MODULE_CONFIG_NAMESPACE,
) -> dict[str, Any]:
    """The GPU Operator's ``driver.kernelModuleConfig`` ConfigMap with ``NVreg_ExcludedGpus``
    listing ``uuids`` in ``nvidia.conf`` (one parameter per line; GPU Operator docs,
    "Customizing NVIDIA GPU Driver Parameters"); the other lines of ``existing`` (its current
    ``nvidia.conf``) are kept. The driver does not attach a listed GPU from its next load: the
    driver container's next restart or the node's next boot (nv-reg.h: "cannot be attached or
    used"). No GPU isolated: the line is dropped."""
    kept = [line for line in existing.splitlines()
            if line.strip() and not line.strip().startswith(f"{EXCLUDED_GPUS}=")]
    listed = sorted(set(uuids))
    lines = kept + ([f"{EXCLUDED_GPUS}={','.join(listed)}"] if listed else [])
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"nvidia.conf": "".join(f"{line}\n" for line in lines)},
    }
