"""The Prometheus facts of the return-to-pool decision: a fixed plan of instant queries, scoped
to the nodes the return step evaluates (their answers grow with the isolated nodes, not with the
fleet; one plan per batch of names that fits a GET URL), and pure readers of one node's answer.

Read per GPU, from dcgm-exporter and the node agent:

- the last Xid since the driver loaded (``DCGM_FI_DEV_XID_ERRORS`` as is, without the 24 h
  offset the isolation plan uses: a reboot, a driver reload or the exporter's restart for a
  GPU reset empties it, so any hardware value left is an Xid of this boot). The controller
  judges it with ``policy.xid_signals``, the guard's own Xid logic;
- ``DCGM_FI_DEV_ROW_REMAP_PENDING`` (cards without row remapping do not export it);
- the PCIe link width and generation against the maximum: DCGM's max-link fields where a
  cluster's counter CSV exports them, else the highest value seen in ``pcie_lookback``;
  utilisation says whether the GPU is under load (idle GPUs lower the generation);
- the agent's ``gpuguard_check_status`` (1 for each check's current status).

Any bad or stale answer raises ``SourceError`` in ``PrometheusSource`` (the plan carries the
freshness queries), which leaves every fact unknown: missing data never returns a node.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta

from gpuguard.model import decisions, fleet, return_to_pool
from gpuguard.model import metric_names as names
from gpuguard.model.series import gpu_of
from gpuguard.sources import node_scope, prometheus

WIDTH_SEEN_MAX = f"{names.DCGM_PCIE_LINK_WIDTH} seen max"
GEN_SEEN_MAX = f"{names.DCGM_PCIE_LINK_GEN} seen max"
LOADED_UTIL_PCT = 80.0
"""A GPU at least this busy keeps its link at full generation (idle ones step it down)."""


@dataclass(frozen=True, slots=True)
class ReturnFactsPlan:
    """The queries of the return facts, by the sample name they are stored under: of every
    node (``nodes`` None), or of ``nodes`` only — the nodes the return step evaluates, so the
    answers grow with the isolated nodes, not with the fleet (docs/design.md#return-to-pool)."""

    pcie_lookback: timedelta = timedelta(days=7)
    nodes: tuple[str, ...] | None = None

    def queries(self) -> dict[str, str]:
        look = f"{int(self.pcie_lookback.total_seconds())}s"
        of = self._of
        return {
            names.DCGM_XID_LAST: f"{of(names.DCGM_XID_LAST)} > 0",  # 0 (no Xid) reads as absent
            names.DCGM_ROW_REMAP_PENDING: of(names.DCGM_ROW_REMAP_PENDING),
            names.DCGM_PCIE_LINK_WIDTH: of(names.DCGM_PCIE_LINK_WIDTH),
            names.DCGM_PCIE_LINK_GEN: of(names.DCGM_PCIE_LINK_GEN),
            names.DCGM_PCIE_MAX_LINK_WIDTH: of(names.DCGM_PCIE_MAX_LINK_WIDTH),
            names.DCGM_PCIE_MAX_LINK_GEN: of(names.DCGM_PCIE_MAX_LINK_GEN),
            WIDTH_SEEN_MAX: of(names.DCGM_PCIE_LINK_WIDTH, f"max_over_time({{}}[{look}])"),
            GEN_SEEN_MAX: of(names.DCGM_PCIE_LINK_GEN, f"max_over_time({{}}[{look}])"),
            names.DCGM_GPU_UTIL: of(names.DCGM_GPU_UTIL),
            names.CHECK_STATUS: f"{of(names.CHECK_STATUS)} == 1",
        } | prometheus.freshness_queries()

    def batches(self, nodes: Iterable[str], max_chars: int) -> list[ReturnFactsPlan]:
        """The plan scoped to ``nodes``, in as many plans as ``node_scope.batches`` makes; no
        nodes, no plan."""
        return [
            dataclasses.replace(self, nodes=batch)
            for batch in node_scope.batches(nodes, max_chars)
        ]

    def _of(self, metric: str, around: str = "{}") -> str:
        """``metric`` (inside ``around``), of the plan's nodes (``node_scope.selector``)."""
        if self.nodes is None:
            return around.format(metric)
        return node_scope.selector(metric, self.nodes, around)


class ReturnFactsSource(node_scope.ScopedSource):
    """``ports.NodeMetricsSource``: the return facts of the asked nodes from Prometheus, one
    scoped plan per batch, each read (freshness included) through one ``PrometheusSource``."""

    def __init__(
        self,
        reader: prometheus.PrometheusSource,
        plan: ReturnFactsPlan | None = None,
        *,
        max_regex_chars: int = node_scope.MATCHER_CHARS,
    ) -> None:
        base = plan or ReturnFactsPlan()
        super().__init__(
            reader,
            lambda batch: dataclasses.replace(base, nodes=batch),
            max_regex_chars=max_regex_chars,
        )


def dcgm_reporting(samples: Iterable[fleet.MetricSample]) -> bool:
    """Whether dcgm-exporter reports this node's GPUs at all (else its facts are unknown)."""
    return any(s.name == names.DCGM_GPU_UTIL for s in samples)


def xid_samples(samples: Iterable[fleet.MetricSample]) -> tuple[fleet.MetricSample, ...]:
    """The last-Xid gauge samples, for ``policy.xid_signals.hardware_xids``."""
    return tuple(s for s in samples if s.name == names.DCGM_XID_LAST)


def row_remap_pending(samples: Iterable[fleet.MetricSample]) -> dict[str, float]:
    """Per GPU, ``DCGM_FI_DEV_ROW_REMAP_PENDING`` (empty: not exported by these cards)."""
    return {gpu_of(s.labels): s.value for s in samples if s.name == names.DCGM_ROW_REMAP_PENDING}


def pcie_links(samples: Iterable[fleet.MetricSample]) -> tuple[return_to_pool.PcieLink, ...]:
    """Each GPU's link against its maximum; GPUs without a width reading are not reported."""
    by_gpu: dict[str, dict[str, float]] = {}
    for sample in samples:
        by_gpu.setdefault(gpu_of(sample.labels), {})[sample.name] = sample.value
    return tuple(
        _link(gpu, values)
        for gpu, values in sorted(by_gpu.items())
        if names.DCGM_PCIE_LINK_WIDTH in values and names.DCGM_PCIE_LINK_GEN in values
    )


def conformance(samples: Iterable[fleet.MetricSample]) -> dict[str, decisions.CheckStatus]:
    """The agent's current status per check (empty: no agent reports on this node)."""
    statuses = {}
    for sample in samples:
        if sample.name != names.CHECK_STATUS or sample.value != 1:
            continue
        check, status = sample.labels.get("check"), sample.labels.get("status", "")
        if check and status in decisions.CheckStatus.__members__:
            statuses[check] = decisions.CheckStatus(status)
    return statuses


def _link(gpu: str, values: Mapping[str, float]) -> return_to_pool.PcieLink:
    width, generation = (
        int(values[names.DCGM_PCIE_LINK_WIDTH]),
        int(values[names.DCGM_PCIE_LINK_GEN]),
    )
    max_width = values.get(names.DCGM_PCIE_MAX_LINK_WIDTH, values.get(WIDTH_SEEN_MAX, width))
    max_generation = values.get(names.DCGM_PCIE_MAX_LINK_GEN, values.get(GEN_SEEN_MAX, generation))
    return return_to_pool.PcieLink(
        gpu=gpu,
        width=width,
        max_width=int(max_width),
        generation=generation,
        max_generation=int(max_generation),
        under_load=values.get(names.DCGM_GPU_UTIL, 0.0) >= LOADED_UTIL_PCT,
    )
