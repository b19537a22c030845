"""The ``gpuguard.io/gpu-isolated`` mark: GPUs gpuguard took out of service on a node that
keeps serving with its other GPUs (docs/gpu-isolation.md).

The value is a JSON list, one object per GPU: which card (``uuid``), which slot (``pci``), its
index when isolated, when, the fault, the mechanisms that keep it out, and what the last
verified application saw (the boot ID it was applied on, the node's GPU capacity before
the isolation, whether the isolation Job found the fault in the host's kernel log). It is the
only record of a GPU isolation: every tick derives from it what must be applied again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from enum import StrEnum

from gpuguard.model import annotation_keys, fleet, pci, timestamps

KEY = annotation_keys.GPU_ISOLATED
DEVICE_PLUGIN_LABEL = annotation_keys.DEVICE_PLUGIN_LABEL
DEVICE_PLUGIN_EXCLUDING = "excluding"
"""The label value that moves the node off the cluster's device-plugin DaemonSet onto one of
the chart's per-node instances (docs/gpu-isolation.md#what-the-cluster-runs-host-driver-route)."""
DEVICE_PLUGIN_VISIBLE_LABEL = annotation_keys.DEVICE_PLUGIN_VISIBLE_LABEL
OPERATOR_DEVICE_PLUGIN_LABEL = annotation_keys.OPERATOR_DEVICE_PLUGIN_LABEL
OPERATOR_PLUGIN_POD = "nvidia-device-plugin-daemonset"
"""The name prefix of the GPU Operator's device-plugin pods (its DaemonSet
``nvidia-device-plugin-daemonset``)."""
"""Which of the chart's instances: the GPU indices it sees, joined by ``-`` (``0-2-3``). A
DaemonSet's environment is the same on every node and the NVIDIA container runtime reads
``NVIDIA_VISIBLE_DEVICES`` when it creates the container, so the per-node subset must come
from a DaemonSet per subset, selected by this label."""


DRA_DRIVER = "gpu.nvidia.com"
"""The driver name of NVIDIA's DRA driver (k8s-dra-driver-gpu) in ResourceSlices and
DeviceTaintRules (docs/gpu-isolation.md#dra)."""

DEVICE_PLUGIN_PODS = ("nvidia-device-plugin", "gpuguard-device-plugin")
"""Name prefixes of the device-plugin pods whose restarts make gpuguard re-apply (the NVIDIA
chart's and the GPU Operator's ``nvidia-device-plugin-*``, the per-node instance's)."""


class Scope(StrEnum):
    GPU = "gpu"
    NODE = "node"


class Mechanism(StrEnum):
    """What keeps an isolated GPU out (docs/gpu-isolation.md has each one's reach)."""

    COMPUTE_PROHIBITED = "compute-prohibited"  # safety net: new CUDA contexts fail
    DEVICE_PLUGIN = "device-plugin"  # the per-node plugin instance does not advertise it


DEFAULT_MECHANISMS = (Mechanism.COMPUTE_PROHIBITED, Mechanism.DEVICE_PLUGIN)


@dataclass(frozen=True, slots=True)
class IsolatedGpu:
    uuid: str
    pci: str
    index: str
    at: datetime
    fault: str  # the fault label, e.g. ``xid-48``
    mechanism: str = "+".join(DEFAULT_MECHANISMS)
    capacity: int = 0  # the node's GPU capacity before this isolation
    applied_boot: str = ""  # the boot ID the mechanisms were last verified on ("" : not yet)
    confirmed: bool = False  # the isolation Job found the fault in the host's kernel log
    applied_at: datetime | None = None  # the last verified application
    plugin: str = ""  # the device-plugin pod (name#restarts) that last advertised without it
    returning: bool = False  # compute mode back to Default for its burn-in; still not advertised
    evicted: bool = False  # the opt-in eviction of the pods on it is done (once per isolation)

    @property
    def mechanisms(self) -> tuple[Mechanism, ...]:
        return tuple(Mechanism(m) for m in self.mechanism.split("+") if m)

    def applied(
        self, boot_id: str, at: datetime, plugin: str, *, confirmed: bool
    ) -> IsolatedGpu:
        return replace(
            self,
            applied_boot=boot_id,
            applied_at=at,
            plugin=plugin,
            confirmed=self.confirmed or confirmed,
        )

    def with_pods_evicted(self) -> IsolatedGpu:
        return replace(self, evicted=True)

    def held_again(self) -> IsolatedGpu:
        """Back to held after a return that did not pass: applied again at the next tick."""
        return replace(self, returning=False, applied_boot="")

    def to_json(self) -> dict[str, object]:
        applied = timestamps.format_utc(self.applied_at) if self.applied_at else None
        return asdict(self) | {"at": timestamps.format_utc(self.at), "applied_at": applied}


def parse(text: str | None) -> tuple[IsolatedGpu, ...]:
    """The mark's isolated GPUs (``fleet.Node.marks.gpus``); a malformed entry is skipped
    (its GPU is judged again from live signals and, if still faulty, isolated again)."""
    if not text:
        return ()
    try:
        items = json.loads(text)
    except ValueError:
        return ()
    if not isinstance(items, list):
        return ()
    return tuple(e for item in items if (e := _entry(item)) is not None)


def _entry(item: object) -> IsolatedGpu | None:
    if not isinstance(item, dict):
        return None
    at = timestamps.parse_utc(str(item.get("at", "")))
    uuid = str(item.get("uuid", ""))
    if at is None or not uuid:
        return None
    try:
        entry = IsolatedGpu(
            uuid=uuid,
            pci=str(item.get("pci", "")),
            index=str(item.get("index", "")),
            at=at,
            fault=str(item.get("fault", "")),
            mechanism=str(item.get("mechanism", "+".join(DEFAULT_MECHANISMS))),
            capacity=int(item.get("capacity", 0)),
            applied_boot=str(item.get("applied_boot", "")),
            confirmed=bool(item.get("confirmed", False)),
            applied_at=timestamps.parse_utc(str(item.get("applied_at") or "")),
            plugin=str(item.get("plugin", "")),
            returning=item.get("returning") is True,
            evicted=item.get("evicted") is True,
        )
        entry.mechanisms  # noqa: B018 - an unknown mechanism makes the entry unreadable
    except (TypeError, ValueError):
        return None
    return entry


def to_annotation(entries: tuple[IsolatedGpu, ...]) -> str | None:
    """The annotation value; None (remove the key) when no GPU is isolated any more."""
    if not entries:
        return None
    return json.dumps([e.to_json() for e in entries], sort_keys=True, separators=(",", ":"))


def is_isolated(entries: tuple[IsolatedGpu, ...], uuid: str | None, slot: str | None) -> bool:
    """The card is among ``entries`` (by UUID, else by its PCI slot)."""
    if uuid:
        return any(e.uuid == uuid for e in entries)
    address = pci.try_normalize_pci(slot)
    return address is not None and any(pci.try_normalize_pci(e.pci) == address for e in entries)


def expected_capacity(entries: tuple[IsolatedGpu, ...]) -> int | None:
    """The GPU count the node should advertise with its isolated GPUs excluded."""
    before = max((e.capacity for e in entries), default=0)
    return before - len(entries) if before else None


def visible_indices(entries: tuple[IsolatedGpu, ...]) -> str | None:
    """The value of the visible-devices label: the node's GPU indices (NVML order, the same
    indices ``NVIDIA_VISIBLE_DEVICES`` takes) without the isolated ones; None when the
    capacity or an index is unknown (no instance can be chosen)."""
    before = max((e.capacity for e in entries), default=0)
    if not before or not all(e.index.isdigit() for e in entries):
        return None
    out = {int(e.index) for e in entries}
    return "-".join(str(i) for i in range(before) if i not in out) or None


def plugin_labels(
    entries: tuple[IsolatedGpu, ...], *, operator: bool = False
) -> dict[str, str | None]:
    """The node labels that select the per-node device plugin for ``entries`` (all removed
    when none is left, or when no instance fits: the cluster's plugin comes back). On a GPU
    Operator node (``operator``) the operand label ``nvidia.com/gpu.deploy.device-plugin=false``
    too: the operator's plugin leaves the node, and comes back when the label is removed (the
    operator sets its ``nvidia.com/gpu.deploy.*`` labels to ``true`` where they are missing)."""
    visible = visible_indices(entries) if entries else None
    extra = {OPERATOR_DEVICE_PLUGIN_LABEL: None if visible is None else "false"}
    if visible is None:
        labels: dict[str, str | None] = {DEVICE_PLUGIN_LABEL: None,
                                         DEVICE_PLUGIN_VISIBLE_LABEL: None}
    else:
        labels = {DEVICE_PLUGIN_LABEL: DEVICE_PLUGIN_EXCLUDING,
                  DEVICE_PLUGIN_VISIBLE_LABEL: visible}
    return labels | extra if operator else labels


def operator_plugin_running(pods: Iterable[fleet.Pod]) -> bool:
    """Whether the GPU Operator's device-plugin pod is still on the node (it sees every GPU)."""
    live = (fleet.PodPhase.RUNNING, fleet.PodPhase.PENDING)
    return any(p.name.startswith(OPERATOR_PLUGIN_POD) and p.phase in live for p in pods)


def unexplained_missing(node: fleet.Node) -> int:
    """GPUs not offered on the node beyond its isolated ones that the device plugin still
    counts (capacity > allocatable because of them, before the exclusion took effect)."""
    entries = node.marks.gpus
    expected = expected_capacity(entries)
    counted = 0 if expected is None else max(0, min(len(entries), node.gpu_capacity - expected))
    return max(0, node.gpus_missing - counted)


def plugin_stamp(pods: Iterable[fleet.Pod]) -> str:
    """``name#restarts`` of the node's running device-plugin pod ("" : none is Ready): a new
    pod or one more restart means the plugin enumerated the GPUs again."""
    for pod in sorted(pods, key=lambda p: p.name):
        if pod.name.startswith(DEVICE_PLUGIN_PODS) and pod.ready:
            return f"{pod.name}#{pod.restarts}"
    return ""
