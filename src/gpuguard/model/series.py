"""Which node and which GPU a Prometheus series belongs to: one label precedence for every
exporter gpuguard reads.

- node: ``node`` (kube-state-metrics, gpuguard's agent), else dcgm-exporter's ``Hostname``
  (``hostname`` since dcgm-exporter 4.5; see tests/data/reference/dcgm_exporter_counters.md);
- GPU: the ``gpu`` index (dcgm-exporter, the agent), else the card's UUID (dcgm ``UUID``, the
  agent's ``uuid``), else its PCI address (the agent's ``pci``, dcgm ``pci_bus_id``).

A series that names two different nodes is forged (docs/security.md#metric-forgery): ``node``
is the scrape target's node (the monitors write it from ``__meta_kubernetes_pod_node_name``),
and a pod that exports ``Hostname``/``hostname`` (dcgm-exporter's) or its own ``node`` (which
Prometheus renames ``exported_node`` when the target has one) of another node claims a fault
where it does not run. ``claimed_node`` says which node it claims; ``source_of`` names the
scrape target that produced it, for the finding.
"""

from __future__ import annotations

from collections.abc import Mapping

NODE_LABELS = ("node", "Hostname", "hostname")
GPU_LABELS = ("gpu", "UUID", "uuid", "pci", "pci_bus_id")
POD_LABELS = (*NODE_LABELS, *GPU_LABELS, "namespace", "pod")
"""Where a series is and the pod on it: all the guard reads of a GPU's pod mapping."""


CLAIM_LABELS = ("exported_node", "Hostname", "hostname")
"""Labels an exporter writes itself to say which node a series is of."""
SOURCE_LABELS = ("job", "namespace", "pod", "instance")
"""The scrape target's labels: who produced a series."""


def claimed_node(labels: Mapping[str, str]) -> str | None:
    """The other node a series claims: a ``CLAIM_LABELS`` value that is not its target's
    ``node``; None when it has no target node or claims none other."""
    target = labels.get("node")
    if not target:
        return None
    for key in CLAIM_LABELS:
        if (claimed := labels.get(key)) and claimed != target:
            return claimed
    return None


def source_of(labels: Mapping[str, str]) -> str:
    """The scrape target that produced a series, as ``job=... namespace=... pod=...``."""
    named = [f"{key}={labels[key]}" for key in SOURCE_LABELS if labels.get(key)]
    return " ".join(named) or "an unnamed target"


def node_of(labels: Mapping[str, str]) -> str | None:
    """The node a series belongs to; None when it names none."""
    for key in NODE_LABELS:  # a loop, not next(genexpr): called for every sample of a tick
        if found := labels.get(key):
            return found
    return None


def gpu_of(labels: Mapping[str, str]) -> str:
    """The GPU a series belongs to (index, else UUID, else PCI address); ``?`` when none."""
    for key in GPU_LABELS:
        if found := labels.get(key):
            return found
    return "?"
