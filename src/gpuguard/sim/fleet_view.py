"""What the world's Prometheus would answer to the fleet-health plan
(``sources.fleet_health.HealthQueryPlan``), computed from the world's state over time.

The simulated dcgm-exporter and node-exporter render, at any instant, each GPU's clock-event
reasons bitmask (``DCGM_FI_DEV_CLOCKS_EVENT_REASONS``, the OR of the bits of the ``throttle``
spans active then), its NVLink error counters (``nvlink_errors`` spans: rate × time), a PCIe
replay counter (0: no event changes it) and each node's InfiniBand port counters
(``node_infiniband_link_downed_total`` counts the ``ib_flap`` downs so far; the link comes
back each time, so ``link_error_recovery`` is not counted). Because the state keeps spans and
times, any past instant renders exactly, and the plan's windows are answered from 15 s scrapes:
the share of 1-minute steps a bit was set (``avg_over_time(...[w:1m])``), and a counter's
``increase`` over the window as Prometheus computes it from the scrapes the exporter answered
(``prometheus_view.extrapolated_increase``; under two scrapes, no series, as Prometheus).
Only GPUs and nodes whose exporter answers are shown. The world, never the product's logic.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial

from gpuguard.model import fleet, subquery
from gpuguard.model import metric_names as names
from gpuguard.sim import exporters, prometheus_view, state, world

SCRAPE = timedelta(seconds=15)
STEP = timedelta(minutes=1)
# the counter label of each series -> the exporter's metric (sim.fleet_exporters serves them)
IB_COUNTERS = {"link_downed": names.IB_LINK_DOWNED, "symbol_error": names.IB_SYMBOL_ERRORS,
               "link_error_recovery": names.IB_LINK_ERROR_RECOVERY,
               "port_errors_received": names.IB_PORT_RCV_ERRORS}  # fmt: skip
NVLINK_COUNTERS = {"crc_flit": names.DCGM_NVLINK_CRC_FLIT, "crc_data": names.DCGM_NVLINK_CRC_DATA,
                   "replay": names.DCGM_NVLINK_REPLAY, "recovery": names.DCGM_NVLINK_RECOVERY}
DEFAULT_PORT = "mlx5_0/1"  # every simulated node has one InfiniBand port


def clock_events(gpu: state.SimGpu, at: datetime) -> int:
    bits = 0
    for start, end, bit in gpu.clock_events:
        if start <= at < end:
            bits |= bit
    return bits


def nvlink_count(gpu: state.SimGpu, counter: str, at: datetime) -> float:
    total = 0.0
    for start, end, rate, which in gpu.nvlink_errors:
        if which == counter and at > start:
            total += rate * (min(at, end) - start).total_seconds() / 60
    return float(math.floor(total))


def _never(at: datetime) -> float:
    """A counter no simulated event changes (PCIe replays, the other IB port counters)."""
    return 0.0


def link_downed(node: state.SimNode, port: str, at: datetime) -> float:
    return float(sum(1 for when, p in node.ib_link_downs if p == port and when <= at))


@dataclass(frozen=True)
class Filters:
    """What the plan's queries keep (``sources.fleet_health.HealthQueryPlan``'s thresholds, as
    numbers in its PromQL): the defaults keep every series, as the unscoped plan asks."""

    throttle_reasons: frozenset[str] = frozenset(names.CLOCK_EVENT_REASON_BITS)
    throttle_min_fraction: float = 0.0
    nvlink_errors_min: float = 0.0
    pcie_replays_min: float = 0.0
    scoped: bool = False


def health_samples(
    played: world.World, at: datetime, window: timedelta, long_window: timedelta,
    filters: Filters = Filters(),
) -> tuple[fleet.MetricSample, ...]:  # fmt: skip
    """The plan's named samples at ``at`` (windows ``window`` and ``long_window``), as
    Prometheus answers the queries ``filters`` describes; with their coverage counts when
    scoped (``count()`` of no series is no series)."""
    out: list[fleet.MetricSample] = []
    scraped = _scrape_before(played, at)
    for node in played.nodes:
        if not exporters.exporter_up(node, scraped):
            continue
        out += _gpu_samples(played, node, scraped, at, window, long_window)
        out += _ib_samples(played, node, at, window, long_window)
    return tuple(_filtered(out, filters) + (_coverage(out, at) if filters.scoped else []))


_THROTTLE = (names.windowed(names.THROTTLE_FRACTION, names.SHORT),
             names.windowed(names.THROTTLE_FRACTION, names.LONG))  # fmt: skip
_NVLINK = names.windowed(names.NVLINK_ERRORS_INCREASE, names.SHORT)
_PCIE = names.windowed(names.PCIE_REPLAYS_INCREASE, names.SHORT)
_IB, _IB_LONG = (names.windowed(names.IB_ERRORS_INCREASE, w) for w in (names.SHORT, names.LONG))
# the labels ``group by`` keeps on the pod mapping (the plan's WORKLOAD_GPUS)
_MAPPING_LABELS = ("node", "Hostname", "hostname", "gpu", "namespace", "pod",
                   "exported_namespace", "exported_pod")  # fmt: skip


def _filtered(
    every: list[fleet.MetricSample], filters: Filters
) -> list[fleet.MetricSample]:
    """What the filtered queries answer: the series ``_kept`` keeps, the pod mapping grouped."""
    grown = {_group(s) for s in every if s.name == _NVLINK and s.value > 0}
    downed = {_group(s) for s in every
              if s.name == _IB and s.labels.get("counter") == "link_downed" and s.value > 0}
    reasons = filters.throttle_reasons & set(names.CLOCK_EVENT_REASON_BITS) or set(
        names.CLOCK_EVENT_REASON_BITS)  # fmt: skip
    out = []
    for s in every:
        if s.name in _THROTTLE:
            keep = s.labels["reason"] in reasons and _at_least(
                s.value, filters.throttle_min_fraction
            )
        elif s.name == _NVLINK:
            keep = filters.nvlink_errors_min <= 0 or _group(s) in grown
        elif s.name == _PCIE:
            keep = _at_least(s.value, filters.pcie_replays_min)
        elif s.name == _IB:
            keep = not filters.scoped or _group(s) in downed
        elif s.name == _IB_LONG:
            keep = not filters.scoped or s.value > 0
        elif s.name == names.GPU_POD_MAPPING and filters.scoped:
            keep = False
            if s.labels.get("pod"):
                grouped = {k: v for k, v in s.labels.items() if k in _MAPPING_LABELS}
                out.append(fleet.MetricSample(s.name, grouped, 1.0, s.timestamp))
        else:
            keep = True
        if keep:
            out.append(s)
    return out


def _at_least(value: float, minimum: float) -> bool:
    return minimum <= 0 or value >= minimum


def _group(s: fleet.MetricSample) -> frozenset[tuple[str, str]]:
    """A series' labels but its ``counter``: its GPU or port (``ignoring (counter)``)."""
    return frozenset((k, v) for k, v in s.labels.items() if k != "counter")


def _coverage(every: list[fleet.MetricSample], at: datetime) -> list[fleet.MetricSample]:
    """The plan's ``count()`` of each kind's unfiltered short-window series; none for none."""
    counts = {
        names.THROTTLE_FRACTION: len({frozenset((k, v) for k, v in s.labels.items()
                                                if k != "reason")
                                      for s in every if s.name == _THROTTLE[0]}),
        names.NVLINK_ERRORS_INCREASE: sum(1 for s in every if s.name == _NVLINK),
        names.PCIE_REPLAYS_INCREASE: sum(1 for s in every if s.name == _PCIE),
        names.IB_ERRORS_INCREASE: sum(1 for s in every if s.name == _IB),
    }  # fmt: skip
    return [fleet.MetricSample(names.coverage(what), {}, float(count), at)
            for what, count in counts.items() if count]  # fmt: skip


def ib_ports(node: state.SimNode, at: datetime | None = None) -> list[str]:
    """The node's InfiniBand ports (``device/port``): the default one and any that flapped
    (by ``at``: node-exporter shows a port from its first link-down, when its event fired)."""
    return sorted({DEFAULT_PORT} | {p for when, p in node.ib_link_downs
                                    if at is None or when <= at})  # fmt: skip


def _port_born(node: state.SimNode, port: str) -> datetime | None:
    """When node-exporter first showed ``port`` (None: the default port, always there)."""
    downs = [when for when, p in node.ib_link_downs if p == port]
    return None if port == DEFAULT_PORT or not downs else min(downs)


def _scrape_before(played: world.World, at: datetime) -> datetime:
    return played.origin + SCRAPE * math.floor((at - played.origin) / SCRAPE)


def gpu_labels(node: state.SimNode, gpu: state.SimGpu) -> dict[str, str]:
    return {node.hostname_label: node.name, "gpu": str(gpu.index), "UUID": gpu.uuid,
            "pci_bus_id": exporters.dcgm_pci(gpu.pci), "modelName": gpu.model}  # fmt: skip


def _gpu_samples(
    played: world.World, node: state.SimNode, scraped: datetime, at: datetime,
    window: timedelta, long_window: timedelta,
) -> Iterable[fleet.MetricSample]:  # fmt: skip
    pods = exporters.pods_by_gpu(node, played.store, scraped)
    for gpu in (g for g in node.gpus if g.on_bus):
        labels = gpu_labels(node, gpu)
        for which, span in ((names.SHORT, window), (names.LONG, long_window)):
            name = names.windowed(names.THROTTLE_FRACTION, which)
            steps = _steps(played, at, span) if gpu.clock_events else []
            masks = [clock_events(gpu, t) for t in steps] if gpu.clock_events else []
            for reason, bit in names.CLOCK_EVENT_REASON_BITS.items():
                share = sum(1 for mask in masks if mask & bit) / max(1, len(steps))
                yield fleet.MetricSample(name, labels | {"reason": reason}, share, at)
        name = names.windowed(names.NVLINK_ERRORS_INCREASE, names.SHORT)
        for counter in NVLINK_COUNTERS:
            grown = _increase(played, node, at, window, partial(nvlink_count, gpu, counter))
            if grown is not None:
                yield fleet.MetricSample(name, labels | {"counter": counter}, grown, at)
        replays = _increase(played, node, at, window, _never)
        if replays is not None:
            yield fleet.MetricSample(names.windowed(names.PCIE_REPLAYS_INCREASE, names.SHORT),
                                     labels, replays, at)  # fmt: skip
        pod = pods.get(gpu.index)
        mapping = {"namespace": pod.namespace, "pod": pod.pod} if pod is not None else {}
        yield fleet.MetricSample(names.GPU_POD_MAPPING, labels | mapping, 0.0, at)


def _increase(
    played: world.World, node: state.SimNode, at: datetime, span: timedelta,
    value_at: Callable[[datetime], float], since: datetime | None = None,
) -> float | None:  # fmt: skip
    """``increase(counter[span])`` at ``at`` from the 15 s scrapes in (at - span, at] the node's
    exporter answered (from ``since``, when the series was born), extrapolated as Prometheus
    does; None: under two scrapes, no series."""
    points = []
    t, start = _scrape_before(played, at), at - subquery.subquery_range(span)
    while t > start and t >= max(played.origin, since or played.origin):
        if exporters.exporter_up(node, t):
            points.append((t, value_at(t)))
        t -= SCRAPE
    return prometheus_view.extrapolated_increase(points[::-1], start, at)


def _steps(played: world.World, at: datetime, span: timedelta) -> list[datetime]:
    """The scrape each 1-minute subquery step in [at - span, at] reads (never before the
    start): the plan's range is ``subquery.subquery_range(span)``, which both Prometheus 2.x
    and 3.x evaluate at those steps."""
    last = datetime.fromtimestamp(math.floor(at.timestamp() / 60) * 60, at.tzinfo)
    out = []
    t = last
    while t > at - subquery.subquery_range(span) and t >= played.origin:
        out.append(_scrape_before(played, t))
        t -= STEP
    return out


def _ib_samples(
    played: world.World, node: state.SimNode, at: datetime, window: timedelta,
    long_window: timedelta,
) -> Iterable[fleet.MetricSample]:  # fmt: skip
    for port in ib_ports(node, at):
        device, number = port.split("/")
        labels = {"instance": f"{node.name}:9100", "device": device, "port": number}
        for which, span, counters in ((names.SHORT, window, tuple(IB_COUNTERS)),
                                      (names.LONG, long_window, ("link_downed",))):  # fmt: skip
            name = names.windowed(names.IB_ERRORS_INCREASE, which)
            for counter in counters:
                value_at = partial(link_downed, node, port) if counter == "link_downed" else _never
                grown = _increase(played, node, at, span, value_at, _port_born(node, port))
                if grown is not None:
                    yield fleet.MetricSample(name, labels | {"counter": counter}, grown, at)
