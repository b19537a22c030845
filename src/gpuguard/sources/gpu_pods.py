"""The pods dcgm-exporter maps to each GPU, read only for the nodes a tick may name them for
(``policy.gpu_pods.nodes_to_name``): one series per GPU a pod holds, so asking it of the
whole fleet every tick would grow the tick's answer with every busy GPU
(docs/gpu-isolation.md#pods)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuguard.model import metric_names as names
from gpuguard.model import series
from gpuguard.sources import node_scope, prometheus


@dataclass(frozen=True, slots=True)
class GpuPodsPlan:
    """The pods on the GPUs of ``nodes`` whose last Xid is 0 (the tick's Xid query answers the
    others, pod labels included), labels reduced to those ``policy.gpu_pods`` reads."""

    nodes: tuple[str, ...]

    def queries(self) -> dict[str, str]:
        by = ", ".join(series.POD_LABELS)
        gauge = node_scope.selector(names.DCGM_XID_LAST, self.nodes, matchers=',pod!=""')
        pods = f"group by ({by}) ({gauge} <= 0)"
        return {names.DCGM_GPU_PODS: pods} | prometheus.freshness_queries()


def source(
    reader: prometheus.PrometheusSource, *, max_regex_chars: int = node_scope.MATCHER_CHARS
) -> node_scope.ScopedSource:
    """``ports.NodeMetricsSource`` of the GPU pods: one scoped plan per batch of nodes."""
    return node_scope.ScopedSource(reader, GpuPodsPlan, max_regex_chars=max_regex_chars)
