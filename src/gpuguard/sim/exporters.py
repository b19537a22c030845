"""The simulator's dcgm-exporter and kube-state-metrics: world state rendered as /metrics.

gpuguard reads the world only through these (and the API server), so they must look like the
real exporters where it matters to detection (tests/data/reference/dcgm_exporter_counters.md,
kube_state_metrics_sample.txt). This module is the public entry point; the work is in
``sim.dcgm`` (dcgm-exporter: label set, sticky XID gauge, GPUs off the bus), ``sim.ksm``
(kube-state-metrics: sanitised resources, conditions, annotations) and ``sim.exposition``
(families and the text format). Rendering is pure: (state, store, now) in, families out;
``metrics_server`` serves them and ``history`` records them for backfill.
"""

from __future__ import annotations

from gpuguard.sim.dcgm import (
    XID_COUNT_WINDOW,
    XID_ERR_MSG,
    PodRef,
    active_workloads,
    dcgm_families,
    dcgm_pci,
    exporter_up,
    pods_by_gpu,
    render_dcgm,
    xid_counts,
    xid_value,
)
from gpuguard.sim.exposition import (
    Family,
    Labels,
    Sample,
    escape_help,
    escape_label,
    format_labels,
    format_value,
    to_text,
)
from gpuguard.sim.ksm import (
    ANNOTATION_ALLOWLIST,
    ksm_families,
    parse_quantity,
    render_ksm,
    resource_unit,
    sanitize,
)

__all__ = [
    "ANNOTATION_ALLOWLIST",
    "XID_COUNT_WINDOW",
    "XID_ERR_MSG",
    "Family",
    "Labels",
    "PodRef",
    "Sample",
    "active_workloads",
    "dcgm_families",
    "dcgm_pci",
    "escape_help",
    "escape_label",
    "exporter_up",
    "format_labels",
    "format_value",
    "ksm_families",
    "parse_quantity",
    "pods_by_gpu",
    "render_dcgm",
    "render_ksm",
    "resource_unit",
    "sanitize",
    "to_text",
    "xid_counts",
    "xid_value",
]
