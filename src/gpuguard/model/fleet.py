"""What the cluster looks like at one instant: nodes, GPUs, pods and metric samples.

A FleetSnapshot is what the sources assemble each tick and what every policy reads. It is
immutable; a new tick makes a new snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from gpuguard.model import node_conditions, node_marks


@dataclass(frozen=True, slots=True)
class Gpu:
    """One physical GPU: ``uuid`` names the card (it follows the card), ``pci`` the slot."""

    node: str
    index: int
    uuid: str
    pci: str
    model: str


class PodPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


@dataclass(frozen=True, slots=True)
class Pod:
    """A pod as gpuguard cares about it: where it runs and how many GPUs it holds."""

    namespace: str
    name: str
    node: str | None
    phase: PodPhase
    gpu_request: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    ready: bool = False
    restarts: int = 0  # container restarts, summed (a device-plugin restart shows here)


@dataclass(frozen=True, slots=True)
class Node:
    """A Kubernetes node, reduced to what the lifecycle decisions read.

    ``conditions`` maps a condition type (``Ready``) to its status (``True``/``False``/
    ``Unknown``). ``resource_version`` is the precondition for every write gpuguard makes.
    """

    name: str
    boot_id: str
    gpu_capacity: int
    gpu_allocatable: int
    unschedulable: bool = False
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    conditions: Mapping[str, str] = field(default_factory=dict)
    kubelet_version: str = ""
    resource_version: str = ""
    isolation_writers: frozenset[str] | None = None
    """The field managers that own ``gpuguard.io/isolated-at`` in ``managedFields``; None when
    not read. Only gpuguard (``annotation_keys.FIELD_MANAGER``) writes it on a real isolation."""
    kernel_version: str = ""  # status.nodeInfo.kernelVersion: the running kernel
    gpu_conditions: Mapping[str, node_conditions.GpuCondition] = field(default_factory=dict)
    """gpuguard's agent's conditions (``model.node_conditions.TYPES``) by type, in full."""

    @property
    def ready(self) -> bool:
        return self.conditions.get("Ready") == "True"

    _marks: node_marks.NodeMarks | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def marks(self) -> node_marks.NodeMarks:
        """gpuguard's marks on the node, parsed at the first read and kept (a cache of
        immutable data: every decision of a tick reads the same parse)."""
        marks = self._marks
        if marks is None:
            marks = node_marks.NodeMarks.parse(self.annotations, self.isolation_writers)
            object.__setattr__(self, "_marks", marks)
        return marks

    @property
    def isolated_by_gpuguard(self) -> bool:
        """gpuguard's cordon: unschedulable, carrying ``gpuguard.io/isolated-at``, and that
        mark written by gpuguard (``marks.isolation``): what ``status``, the
        ``gpuguard_isolated_nodes`` metric and the guard count as gpuguard's isolations."""
        return self.unschedulable and self.marks.isolation is node_marks.Isolation.GPUGUARD

    @property
    def gpus_missing(self) -> int:
        """GPUs the device plugin no longer offers (capacity > allocatable)."""
        return max(0, self.gpu_capacity - self.gpu_allocatable)


@dataclass(frozen=True, slots=True)
class MetricSample:
    """One Prometheus sample: a series (name + labels) and its value at a time."""

    name: str
    labels: Mapping[str, str]
    value: float
    timestamp: datetime


@dataclass(frozen=True, slots=True)
class FleetSnapshot:
    """Everything one tick knows, taken at ``taken_at`` (timezone-aware UTC)."""

    taken_at: datetime
    nodes: tuple[Node, ...] = ()
    gpus: tuple[Gpu, ...] = ()
    pods: tuple[Pod, ...] = ()
    samples: tuple[MetricSample, ...] = ()
    _index: _Index | None = field(default=None, init=False, repr=False, compare=False)

    def node(self, name: str) -> Node | None:
        return self._indexed().nodes.get(name)

    def gpus_of(self, node: str) -> tuple[Gpu, ...]:
        return self._indexed().gpus.get(node, ())

    def pods_on(self, node: str) -> tuple[Pod, ...]:
        return self._indexed().pods.get(node, ())

    def _indexed(self) -> _Index:
        """The lookups by node name, built at the first lookup: a tick that looks up many
        nodes of a 10,000-node fleet must not scan the fleet for each."""
        index = self._index
        if index is None:
            index = _Index.of(self)
            object.__setattr__(self, "_index", index)  # a cache of immutable data
        return index


@dataclass(frozen=True, slots=True)
class _Index:
    nodes: Mapping[str, Node]
    gpus: Mapping[str, tuple[Gpu, ...]]
    pods: Mapping[str, tuple[Pod, ...]]

    @classmethod
    def of(cls, snapshot: FleetSnapshot) -> _Index:
        nodes: dict[str, Node] = {}
        for n in snapshot.nodes:
            nodes.setdefault(n.name, n)  # the first of a repeated name, as a scan finds it
        gpus: dict[str, list[Gpu]] = {}
        for g in snapshot.gpus:
            gpus.setdefault(g.node, []).append(g)
        pods: dict[str | None, list[Pod]] = {}
        for p in snapshot.pods:
            pods.setdefault(p.node, []).append(p)
        return cls(nodes, {k: tuple(v) for k, v in gpus.items()},
                   {k: tuple(v) for k, v in pods.items() if k is not None})  # fmt: skip


@dataclass(frozen=True, slots=True)
class GpuWindow:
    """One GPU's telemetry over a window, as the phantom and utilization policies read it.

    ``stats`` maps ``metric_names.window_stat(metric, stat)`` to the value over the window
    (min/max/avg over every series the GPU had; ``last`` from the current one). ``pods`` are
    the ``namespace/pod`` dcgm-exporter's pod mapping attached to the GPU in the window;
    ``node_gpu_pods`` is the most GPUs held by live pods on the node in the window (None: not
    known). ``seen_at_start``: the GPU already reported at the window's start, so a
    min/max "held" means held for the whole window.
    """

    node: str
    gpu: str
    uuid: str
    model: str
    stats: Mapping[str, float] = field(default_factory=dict)
    pods: tuple[str, ...] = ()
    node_gpu_pods: float | None = None
    seen_at_start: bool = False
    signature_minutes: float | None = None

    def stat(self, metric: str, stat: str) -> float | None:
        return self.stats.get(f"{metric} {stat}")
