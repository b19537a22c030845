"""The fleet-health series on the simulator's live endpoints (``gpuguard sim serve``): what
dcgm-exporter and node-exporter would print at one instant, so a real Prometheus scraping
them answers the product's fleet-health plan (docs/fleet-health.md).

dcgm-exporter: ``DCGM_FI_DEV_CLOCKS_EVENT_REASONS`` (the bitmask gauge of the clock-event
reasons active now), the NVLink error counters and ``DCGM_FI_DEV_PCIE_REPLAY_COUNTER`` per GPU
on the bus (dcgm-exporter's ``dcp-metrics-included.csv`` / ``default-counters.csv`` field
names). node-exporter: the InfiniBand port counters of its ``infiniband`` collector
(``node_infiniband_*_total{device, port}``, read from /sys/class/infiniband). The values come
from ``sim.fleet_view``, the same world the demo's fleet-health answers are computed from.
"""

from __future__ import annotations

from datetime import datetime

from gpuguard.model import metric_names as names
from gpuguard.sim import exposition, fleet_view, state


def dcgm_health_families(node: state.SimNode, now: datetime) -> list[exposition.Family]:
    """The clock-event bitmask, NVLink error counters and PCIe replay counter of ``node``."""
    gpus = [(tuple(fleet_view.gpu_labels(node, g).items()), g) for g in node.gpus if g.on_bus]
    families = [exposition.Family(
        names.DCGM_CLOCKS_EVENT_REASONS, "gauge", "Current clock event reasons (bitmask).",
        tuple(exposition.Sample(labels, fleet_view.clock_events(g, now)) for labels, g in gpus),
    )]  # fmt: skip
    families += [
        exposition.Family(metric, "counter", f"Total number of NVLink {counter} errors.",
                          tuple(exposition.Sample(labels, fleet_view.nvlink_count(g, counter, now))
                                for labels, g in gpus))
        for counter, metric in fleet_view.NVLINK_COUNTERS.items()
    ]  # fmt: skip
    families.append(exposition.Family(
        names.DCGM_PCIE_REPLAY, "counter", "Total number of PCIe retries.",
        tuple(exposition.Sample(labels, 0.0) for labels, _ in gpus),
    ))  # fmt: skip
    return [f for f in families if f.samples]


def render_node_exporter(node: state.SimNode, now: datetime) -> str:
    """``node``'s node-exporter /metrics body: its InfiniBand port counters only."""
    return exposition.to_text(node_exporter_families(node, now))


def node_exporter_families(node: state.SimNode, now: datetime) -> list[exposition.Family]:
    """``node``'s node-exporter families: its InfiniBand port counters only."""
    families = []
    for counter, metric in fleet_view.IB_COUNTERS.items():
        samples = []
        for port in fleet_view.ib_ports(node, now):
            device, number = port.split("/")
            value = fleet_view.link_downed(node, port, now) if counter == "link_downed" else 0.0
            samples.append(exposition.Sample((("device", device), ("port", number)), value))
        families.append(exposition.Family(
            metric, "counter", f"InfiniBand port {counter} counter.", tuple(samples)))
    return families
