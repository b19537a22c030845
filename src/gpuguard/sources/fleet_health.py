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
from gpuguard.model import settings as settings_model
from gpuguard.sources import gpu_metrics, node_scope, prometheus

REASONS = f"({names.DCGM_CLOCKS_EVENT_REASONS} or {names.DCGM_CLOCK_THROTTLE_REASONS})"
NVLINK_COUNTERS = {
    "crc_flit": names.DCGM_NVLINK_CRC_FLIT,
    "crc_data": names.DCGM_NVLINK_CRC_DATA,
    "replay": names.DCGM_NVLINK_REPLAY,
    "recovery": names.DCGM_NVLINK_RECOVERY,
}
# dcgm-exporter's series of the GPUs a workload pod holds (``gpu_metrics.pod_of``: its pod in
# ``exported_pod`` behind a ServiceMonitor without honorLabels, else in ``pod`` unless that is
# the exporter's own), with the labels ``pod_gpus`` reads.
WORKLOAD_GPUS = (
    "group by (node, Hostname, hostname, gpu, namespace, pod, exported_namespace, exported_pod)"
    f' ({names.DCGM_GPU_UTIL}{{exported_pod!=""}}'
    f' or {names.DCGM_GPU_UTIL}{{exported_pod="", pod!="",'
    f' pod!~".*{gpu_metrics.EXPORTER_POD.pattern}.*"}})'
)
IB_COUNTERS = {
    "link_downed": names.IB_LINK_DOWNED,
    "link_error_recovery": names.IB_LINK_ERROR_RECOVERY,
    "symbol_error": names.IB_SYMBOL_ERRORS,
    "port_errors_received": names.IB_PORT_RCV_ERRORS,
}


@dataclass(frozen=True, slots=True)
class HealthQueryPlan:
    """The queries of one evaluation, by the sample name they are stored under.

    Built with the findings' thresholds (``for_settings``), the plan asks Prometheus only for
    what can make a finding (docs/fleet-health.md#what-the-guard-asks-prometheus): the counted
    clock-event reasons at or over ``throttle_min_fraction``, every NVLink counter of a GPU with
    one that grew, PCIe replays at or over ``pcie_replays_min``, every counter of an InfiniBand
    port that went down, the pod mapping of GPUs a workload holds — so a healthy fleet's answers
    are almost empty. What was filtered is not lost as "not collected": for each kind a
    ``metric_names.coverage`` count says how many series the exporter had before the filter
    (none: ``policy.interconnect.unchecked``). A threshold of 0 makes every series a finding,
    so it filters nothing. The defaults ask for every series (no threshold known)."""

    window: timedelta = timedelta(minutes=15)
    long_window: timedelta = timedelta(hours=6)
    step: timedelta = timedelta(minutes=1)
    throttle_reasons: frozenset[str] = frozenset(names.CLOCK_EVENT_REASON_BITS)
    throttle_min_fraction: float = 0.0
    nvlink_errors_min: float = 0.0
    pcie_replays_min: float = 0.0
    scoped: bool = False  # filters the IB counters and the pod mapping too
    topology: bool = True  # False: the controller reads it apart (``TopologyPlan``), cached


    @classmethod
    def for_settings(
        cls, fleet_settings: settings_model.FleetHealthSettings, *, topology: bool = True
    ) -> HealthQueryPlan:
        """The guard's plan: its windows, and only what its thresholds can find (the agent's
        topology too unless ``topology`` is False)."""
        return cls(
            fleet_settings.window,
            fleet_settings.persistence_window,
            throttle_reasons=fleet_settings.throttle_reasons,
            throttle_min_fraction=fleet_settings.throttle_min_fraction,
            nvlink_errors_min=fleet_settings.nvlink_errors_min,
            pcie_replays_min=fleet_settings.pcie_replays_min,
            scoped=True,
            topology=topology,
        )

    def queries(self) -> dict[str, str]:
        # the counters' ranges too: on the scrape grid, [900s] reads one sample more on 2.x
        short, long = subquery.promql_range(self.window), subquery.promql_range(self.long_window)
        short_range, step = short, _duration(self.step)
        nvlink = _labelled_increases(NVLINK_COUNTERS, short)
        pcie = f"increase({names.DCGM_PCIE_REPLAY}[{short}])"
        ib = _labelled_increases(IB_COUNTERS, short)
        ib_long = _labelled_increases({"link_downed": names.IB_LINK_DOWNED}, long)
        return {
            names.windowed(names.THROTTLE_FRACTION, names.SHORT):
                self.throttle_query(short_range, step),
            names.windowed(names.THROTTLE_FRACTION, names.LONG):
                self.throttle_query(subquery.promql_range(self.long_window), step),
            names.windowed(names.NVLINK_ERRORS_INCREASE, names.SHORT):
                _grown(nvlink, nvlink) if self.nvlink_errors_min > 0 else nvlink,
            names.windowed(names.PCIE_REPLAYS_INCREASE, names.SHORT):
                _at_least(pcie, self.pcie_replays_min),
            names.windowed(names.IB_ERRORS_INCREASE, names.SHORT):
                _grown(ib, f"increase({names.IB_LINK_DOWNED}[{short}])") if self.scoped else ib,
            names.windowed(names.IB_ERRORS_INCREASE, names.LONG):
                f"({ib_long}) > 0" if self.scoped else ib_long,
            names.GPU_POD_MAPPING: WORKLOAD_GPUS if self.scoped else names.DCGM_GPU_UTIL,
        } | (topology_queries(None) if self.topology else {}) | self._coverage(
            short_range, step, nvlink, pcie, ib
        ) | prometheus.freshness_queries()  # fmt: skip

    def throttle_query(self, window: str, step: str) -> str:
        """Per GPU and counted clock-event reason, the share of ``window`` the reason's bit was
        set, where it reaches ``throttle_min_fraction``; the caller passes
        ``subquery.promql_range`` so Prometheus 2.x and 3.x evaluate the same steps, those in
        ``[t - window, t]``."""
        bits = {reason: bit for reason, bit in names.CLOCK_EVENT_REASON_BITS.items()
                if reason in self.throttle_reasons} or names.CLOCK_EVENT_REASON_BITS  # fmt: skip
        parts = []
        for reason, bit in bits.items():
            share = f"avg_over_time((floor({REASONS} / {bit}) % 2)[{window}:{step}])"
            kept = _at_least(share, self.throttle_min_fraction)
            parts.append(f'label_replace({kept}, "reason", "{reason}", "", "")')
        return " or ".join(parts)

    def _coverage(
        self, short_range: str, step: str, nvlink: str, pcie: str, ib: str
    ) -> dict[str, str]:
        """How many series each kind had before its filter (unscoped: its series say it)."""
        if not self.scoped:
            return {}
        return {
            names.coverage(names.THROTTLE_FRACTION):
                f"count(last_over_time({REASONS}[{short_range}:{step}]))",
            names.coverage(names.NVLINK_ERRORS_INCREASE): f"count({nvlink})",
            names.coverage(names.PCIE_REPLAYS_INCREASE): f"count({pcie})",
            names.coverage(names.IB_ERRORS_INCREASE): f"count({ib})",
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class TopologyPlan:
    """The agent's GPU topology alone, of every node (``nodes`` None) or of ``nodes``: the
    controller reads it apart from the fleet-health plan and keeps it, as the agent re-reads it
    only every few hours (docs/fleet-health.md#topology)."""

    nodes: tuple[str, ...] | None = None

    def queries(self) -> dict[str, str]:
        return topology_queries(self.nodes) | prometheus.freshness_queries()


_TOPOLOGY_KEYS = {  # the agent's topology series and the labels that make one
    names.GPU_NVLINK_PEER: "node, gpu, peer, link",
    names.GPU_NUMA_NODE: "node, gpu, numa",
}


def topology_queries(nodes: tuple[str, ...] | None) -> dict[str, str]:
    """The NVLink matrix and NUMA affinity per GPU, of every node or of ``nodes``."""

    def of(metric: str) -> str:
        return metric if nodes is None else node_scope.selector(metric, nodes)

    return {metric: f"max by ({keys}) ({of(metric)})" for metric, keys in _TOPOLOGY_KEYS.items()}


@dataclass(frozen=True, slots=True)
class TopologyChangesPlan:
    """Per node, how many of its topology series appeared or vanished over the last ``since``
    (a GPU gone, a cell read differently, an agent restarted on other hardware; a node gone
    too): the nodes whose kept matrix may no longer be theirs. A steady fleet answers
    nothing, so the check costs next to nothing to transfer each run."""

    since: timedelta = timedelta(minutes=5)

    def queries(self) -> dict[str, str]:
        offset = _duration(self.since)
        parts = []
        for metric, keys in _TOPOLOGY_KEYS.items():
            now, then = f"max by ({keys}) ({metric})", f"max by ({keys}) ({metric} offset {offset})"
            parts += [f"({now} unless {then})", f"({then} unless {now})"]
        changed = f"count by (node) ({' or '.join(parts)})"
        return {names.GPU_TOPOLOGY_CHANGES: changed} | prometheus.freshness_queries()


def _at_least(query: str, minimum: float) -> str:
    """``query`` where its value reaches ``minimum`` (a minimum of 0 or less keeps all)."""
    return f"({query}) >= {minimum!r}" if minimum > 0 else query


def _grown(query: str, signal: str) -> str:
    """Every series of ``query`` (its ``counter`` label aside) whose ``signal`` grew: all the
    counters of a GPU or port with one that did, for the finding's evidence."""
    return f"({query}) and ignoring (counter) (({signal}) > 0)"


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
