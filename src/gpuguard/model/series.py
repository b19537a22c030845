"""Which node and which GPU a Prometheus series belongs to: one label precedence for every
exporter gpuguard reads.

- node: ``node`` (kube-state-metrics, gpuguard's agent), else dcgm-exporter's ``Hostname``
  (``hostname`` since dcgm-exporter 4.5; see tests/data/reference/dcgm_exporter_counters.md);
- GPU: the ``gpu`` index (dcgm-exporter, the agent), else the card's UUID (dcgm ``UUID``, the
  agent's ``uuid``), else its PCI address (the agent's ``pci``, dcgm ``pci_bus_id``).
"""

from __future__ import annotations

from collections.abc import Mapping

NODE_LABELS = ("node", "Hostname", "hostname")
GPU_LABELS = ("gpu", "UUID", "uuid", "pci", "pci_bus_id")
POD_LABELS = (*NODE_LABELS, *GPU_LABELS, "namespace", "pod")
"""Where a series is and the pod on it: all the guard reads of a GPU's pod mapping."""


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
