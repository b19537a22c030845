"""What the world's Prometheus would answer to the return step's queries (the Xid gauge since
the exporter started, row remap pending, PCIe link width and generation against their max),
read from the world's state: the demo's stand-in for ``sources.return_facts`` over a real
Prometheus. Implements ``model.ports.MetricsSource``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from gpuguard.model import fleet
from gpuguard.model import metric_names as names
from gpuguard.sim import exporters, state, world

PCIE_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


@dataclass
class WorldReturnFacts:
    played: world.World

    def samples(self, at: datetime) -> tuple[fleet.MetricSample, ...]:
        return self._of(at, lambda name: True)

    def samples_of(self, at: datetime, nodes: Sequence[str]) -> tuple[fleet.MetricSample, ...]:
        """The series of ``nodes``, as a query scoped to them by a node label matcher answers."""
        asked = frozenset(nodes)
        return self._of(at, asked.__contains__)

    def _of(self, at: datetime, wanted: Callable[[str], bool]) -> tuple[fleet.MetricSample, ...]:
        out: list[fleet.MetricSample] = []
        for node in self.played.nodes:
            if wanted(node.name) and exporters.exporter_up(node, at):
                out += [s for gpu in node.gpus if gpu.on_bus for s in _gpu(node, gpu, at)]
        return tuple(out)


def _gpu(node: state.SimNode, gpu: state.SimGpu, at: datetime) -> list[fleet.MetricSample]:
    labels = {node.hostname_label: node.name, "gpu": str(gpu.index), "UUID": gpu.uuid}
    xid = exporters.xid_value(node, gpu, at)
    values = {
        names.DCGM_GPU_UTIL: 0.0,
        names.DCGM_XID_LAST: float(xid or 0),
        names.DCGM_ROW_REMAP_PENDING: float(gpu.row_remap_pending),
        names.DCGM_PCIE_LINK_WIDTH: float(gpu.link_width),
        names.DCGM_PCIE_MAX_LINK_WIDTH: float(gpu.link_width_max),
        names.DCGM_PCIE_LINK_GEN: float(PCIE_GEN.get(gpu.link_speed_gts, 0)),
        names.DCGM_PCIE_MAX_LINK_GEN: float(PCIE_GEN.get(gpu.link_speed_max_gts, 0)),
    }
    if not xid:
        del values[names.DCGM_XID_LAST]  # the plan asks ``> 0``: a 0 is no series
    return [fleet.MetricSample(name, labels, value, at) for name, value in values.items()]


@dataclass
class WorldResetCards:
    """What the world's Prometheus would answer to the GPU reset's card queries
    (``sources.reset_cards``): each GPU's pending and failed row remaps (dcgm-exporter) and
    the processes on it (the agent's ``gpuguard_gpu_processes``: one per running workload on
    that GPU). A GPU off the bus and a node whose exporter is down have no series."""

    played: world.World

    def samples_of(self, at: datetime, nodes: Sequence[str]) -> tuple[fleet.MetricSample, ...]:
        out: list[fleet.MetricSample] = []
        for node in self.played.nodes:
            if node.name not in nodes or not exporters.exporter_up(node, at):
                continue
            for gpu in (g for g in node.gpus if g.on_bus):
                dcgm = {node.hostname_label: node.name, "gpu": str(gpu.index), "UUID": gpu.uuid}
                agent = {"node": node.name, "gpu": str(gpu.index), "uuid": gpu.uuid}
                busy = sum(1 for w in node.workloads if gpu.index in w.gpus
                           and (w.ends is None or w.ends > at))  # fmt: skip
                out += [
                    fleet.MetricSample(names.DCGM_ROW_REMAP_PENDING, dcgm,
                                       float(gpu.row_remap_pending), at),
                    fleet.MetricSample(names.DCGM_ROW_REMAP_FAILURE, dcgm,
                                       float(gpu.row_remap_failure), at),
                    fleet.MetricSample(names.GPU_PROCESSES, agent, float(busy), at),
                ]  # fmt: skip
        return tuple(out)
