"""The pods on one GPU, and which of them the opt-in eviction moves off an isolated card
(docs/gpu-isolation.md#pods). Pure: no I/O, no clock.

The kubelet's PodResources answer (the agent's ``gpuguard_gpu_pod``) is exact; without it,
dcgm-exporter's pod labels on that GPU's series (set only while a pod holds the GPU). Only pods
the API still lists on the node are evicted: a metric outlives its pod by a scrape or two.
Eviction waits until the mechanisms hold the GPU (its replacement pods must not land on it)
and happens once per isolation: the entry's ``evicted`` mark ends it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpuguard.model import fleet, gpu_isolation, node_conditions, series
from gpuguard.model import metric_names as names

KUBELET, DCGM = "kubelet PodResources", "dcgm-exporter"


@dataclass(frozen=True, slots=True)
class OnGpu:
    """The pods (``namespace/name``) holding one GPU, and which source said so."""

    pods: tuple[str, ...]
    source: str


@dataclass(frozen=True, slots=True)
class Eviction:
    """One isolated GPU whose pods are to be evicted now."""

    node: str
    uuid: str
    index: str
    pods: tuple[fleet.Pod, ...]
    source: str


def on_gpu(node: str, uuid: str, samples: Iterable[fleet.MetricSample]) -> OnGpu:
    """The pods on the GPU ``uuid`` of ``node``: PodResources first, else dcgm-exporter."""
    listed = [s for s in samples if uuid and series.node_of(s.labels) == node]
    for name_ok, source in ((_is_pod_resources, KUBELET), (_is_dcgm, DCGM)):
        held = sorted({
            f"{s.labels.get('namespace', '')}/{s.labels['pod']}"
            for s in listed
            if name_ok(s) and _uuid(s) == uuid and s.labels.get("pod")
        })
        if held:
            return OnGpu(tuple(held), source)
    return OnGpu((), "")


def evictions(
    node: fleet.Node, pods: Iterable[fleet.Pod], samples: Iterable[fleet.MetricSample]
) -> tuple[Eviction, ...]:
    """The node's isolated GPUs held on this boot, not returning, not evicted yet, with the
    live pods on each (an entry with none is still returned: it is marked done)."""
    live = {f"{p.namespace}/{p.name}": p for p in pods if p.node == node.name
            and p.phase not in (fleet.PodPhase.SUCCEEDED, fleet.PodPhase.FAILED)}
    listed = tuple(samples)
    out = []
    for entry in node.marks.gpus:
        if entry.evicted or entry.returning or entry.applied_boot != node.boot_id:
            continue
        found = on_gpu(node.name, entry.uuid, listed)
        held = tuple(live[p] for p in found.pods if p in live)
        out.append(Eviction(node.name, entry.uuid, entry.index, held, found.source))
    return tuple(out)


def nodes_to_name(snapshot: fleet.FleetSnapshot) -> tuple[str, ...]:
    """The nodes whose GPU pods this tick may name (``sources.gpu_pods`` reads only theirs):
    an Xid, fallen-off-bus or held-loss signal in the tick's samples, an unambiguous fault in
    their GPU conditions (the isolation's detail names the pods on the faulty GPU), or GPUs
    isolated on them (the opt-in eviction moves their pods)."""
    signalled = {series.node_of(s.labels) for s in snapshot.samples if s.name in _SIGNALS}
    for node in snapshot.nodes:
        if node_conditions.unambiguous_fault(node.gpu_conditions) or node.marks.gpus:
            signalled.add(node.name)
    return tuple(sorted(n for n in signalled if n))


def marked_evicted(node: fleet.Node, uuids: Iterable[str]) -> str | None:
    """The isolation annotation with ``uuids`` marked evicted (their eviction is done)."""
    done = set(uuids)
    entries = node.marks.gpus
    return gpu_isolation.to_annotation(
        tuple(e.with_pods_evicted() if e.uuid in done else e for e in entries)
    )


def _is_pod_resources(s: fleet.MetricSample) -> bool:
    return s.name == names.GPU_POD


def _is_dcgm(s: fleet.MetricSample) -> bool:
    """dcgm-exporter's series at this instant: a day-ago or windowed one names the pods then."""
    return s.name in _DCGM_NOW


_DCGM_NOW = frozenset({names.DCGM_XID_LAST, names.DCGM_GPU_PODS})
_SIGNALS = frozenset({
    names.DCGM_XID_LAST, names.XID_LAST_24H_AGO, names.XID_COUNT_RECENT, names.XID_TOTAL_RECENT,
    names.FALLEN_OFF_BUS_RECENT, names.GPU_LOSS_HELD,
})  # fmt: skip


def _uuid(s: fleet.MetricSample) -> str:
    return s.labels.get("uuid") or s.labels.get("UUID") or ""
