"""The fleet-health query plan (docs/fleet-health.md): throttling, NVLink, PCIe and InfiniBand
error counts over the finding window and the persistence window, the agent's GPU topology, and
dcgm-exporter's pod mapping per GPU — a fixed set of instant queries, whatever the fleet size.

A second ``sources.prometheus.Plan`` beside the guard's (``QueryPlan``): read it with
``prometheus.PrometheusSource(url, HealthQueryPlan(...))``, which validates every answer and
fails closed on stale data like the tick's. Each derived series is stored under its
``metric_names.windowed`` name with a ``reason`` (clock-event bit) or ``counter`` label, so
``policy.interconnect`` reads one sample list.

PromQL has no bitwise AND: ``floor(x / bit) % 2`` is bit ``bit`` of the clock-event bitmask.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from gpuguard.model import fleet, series, subquery
from gpuguard.model import metric_names as names
from gpuguard.sources import gpu_metrics, prometheus

REASONS = f"({names.DCGM_CLOCKS_EVENT_REASONS} or {names.DCGM_CLOCK_THROTTLE_REASONS})"
NVLINK_COUNTERS = {
    "crc_flit": names.DCGM_NVLINK_CRC_FLIT,
    "crc_data": names.DCGM_NVLINK_CRC_DATA,
    "replay": names.DCGM_NVLINK_REPLAY,
    "recovery": names.DCGM_NVLINK_RECOVERY,
}
IB_COUNTERS = {
    "link_downed": names.IB_LINK_DOWNED,
    "link_error_recovery": names.IB_LINK_ERROR_RECOVERY,
    "symbol_error": names.IB_SYMBOL_ERRORS,
    "port_errors_received": names.IB_PORT_RCV_ERRORS,
}


@dataclass(frozen=True, slots=True)
class HealthQueryPlan:
    """The queries of one evaluation, by the sample name they are stored under."""

    window: timedelta = timedelta(minutes=15)
    long_window: timedelta = timedelta(hours=6)
    step: timedelta = timedelta(minutes=1)

    def queries(self) -> dict[str, str]:
        short, long = _duration(self.window), _duration(self.long_window)
        step = _duration(self.step)
        return {
            names.windowed(names.THROTTLE_FRACTION, names.SHORT):
                throttle_query(subquery.promql_range(self.window), step),
            names.windowed(names.THROTTLE_FRACTION, names.LONG):
                throttle_query(subquery.promql_range(self.long_window), step),
            names.windowed(names.NVLINK_ERRORS_INCREASE, names.SHORT):
                _labelled_increases(NVLINK_COUNTERS, short),
            names.windowed(names.PCIE_REPLAYS_INCREASE, names.SHORT):
                f"increase({names.DCGM_PCIE_REPLAY}[{short}])",
            names.windowed(names.IB_ERRORS_INCREASE, names.SHORT):
                _labelled_increases(IB_COUNTERS, short),
            names.windowed(names.IB_ERRORS_INCREASE, names.LONG):
                _labelled_increases({"link_downed": names.IB_LINK_DOWNED}, long),
            names.GPU_NVLINK_PEER: f"max by (node, gpu, peer, link) ({names.GPU_NVLINK_PEER})",
            names.GPU_NUMA_NODE: f"max by (node, gpu, numa) ({names.GPU_NUMA_NODE})",
            names.GPU_POD_MAPPING: names.DCGM_GPU_UTIL,
        } | prometheus.freshness_queries()  # fmt: skip


def throttle_query(window: str, step: str) -> str:
    """Per GPU and clock-event reason, the share of ``window`` the reason's bit was set; the
    caller passes ``subquery.promql_range`` so Prometheus 2.x and 3.x evaluate the same steps,
    those in ``[t - window, t]``."""
    parts = (
        f'label_replace(avg_over_time((floor({REASONS} / {bit}) % 2)[{window}:{step}]), '
        f'"reason", "{reason}", "", "")'
        for reason, bit in names.CLOCK_EVENT_REASON_BITS.items()
    )
    return " or ".join(parts)


def _labelled_increases(counters: dict[str, str], window: str) -> str:
    return " or ".join(
        f'label_replace(increase({metric}[{window}]), "counter", "{label}", "", "")'
        for label, metric in counters.items()
    )


def _duration(delta: timedelta) -> str:
    return f"{int(delta.total_seconds())}s"


def pod_gpus(samples: Iterable[fleet.MetricSample]) -> dict[str, dict[str, tuple[int, ...]]]:
    """``node -> namespace/pod -> GPU indices`` from dcgm-exporter's pod labels per GPU, which
    the exporter takes from the kubelet's PodResources API (docs/fleet-health.md#topology)."""
    held: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    for s in samples:
        if s.name != names.GPU_POD_MAPPING:
            continue
        node, pod, gpu = series.node_of(s.labels), gpu_metrics.pod_of(s.labels), s.labels.get("gpu")
        if node and pod and gpu and gpu.isdigit():
            held[node][pod].add(int(gpu))
    return {node: {pod: tuple(sorted(g)) for pod, g in pods.items()} for node, pods in held.items()}
