"""The facts a GPU reset needs of each isolated card, from Prometheus (docs/remediation.md):
its pending and failed row remaps (dcgm-exporter's ``DCGM_FI_DEV_ROW_REMAP_PENDING`` and
``DCGM_FI_DEV_ROW_REMAP_FAILURE``) and the processes holding it open (the agent's
``gpuguard_gpu_processes``, with ``agent.processScan.enabled``). Scoped to the nodes that wait
for a reset. A fact no series gives stays unknown (None) and an unreadable Prometheus leaves
every card unknown: ``policy.remediation`` never resets on an unknown."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpuguard.errors import SourceError
from gpuguard.model import decisions, fleet, ports
from gpuguard.model import metric_names as names
from gpuguard.model.remediation import CardFacts
from gpuguard.model.series import node_of
from gpuguard.sources import node_scope, prometheus

log = logging.getLogger(__name__)
UUID_LABELS = ("UUID", "uuid")  # dcgm-exporter's spelling, the agent's


@dataclass(frozen=True, slots=True)
class ResetCardsPlan:
    nodes: tuple[str, ...]

    def queries(self) -> dict[str, str]:
        metrics = (names.DCGM_ROW_REMAP_PENDING, names.DCGM_ROW_REMAP_FAILURE,
                   names.GPU_PROCESSES)  # fmt: skip
        return {m: node_scope.selector(m, self.nodes) for m in metrics} | (
            prometheus.freshness_queries()
        )


def waiting(snapshot: fleet.FleetSnapshot) -> dict[str, str]:
    """Node -> the isolated card of each node gpuguard isolated with a ``gpu-reset`` verdict."""
    verdict = str(decisions.Verdict.GPU_RESET)
    return {n.name: uuid for n in snapshot.nodes
            if n.isolated_by_gpuguard and n.marks.verdict == verdict
            and (uuid := n.marks.gpu_uuid) is not None}  # fmt: skip


def card_facts(uuid: str, samples: Iterable[fleet.MetricSample]) -> CardFacts:
    """The card's facts from its node's samples (a series of another card is not read)."""
    values: dict[str, float] = {}
    for s in samples:
        if any(s.labels.get(label) == uuid for label in UUID_LABELS):
            values[s.name] = max(values.get(s.name, 0.0), s.value)

    def positive(name: str) -> bool | None:
        return values[name] > 0 if name in values else None

    processes = values.get(names.GPU_PROCESSES)
    return CardFacts(uuid, positive(names.DCGM_ROW_REMAP_PENDING),
                     positive(names.DCGM_ROW_REMAP_FAILURE),
                     None if processes is None else int(processes))  # fmt: skip


class ResetCards:
    """``controller.remediation.Remediation.cards``: the facts of the cards waiting for a
    reset, read from ``source`` (over Prometheus: ``scoped``; the demo: the world's view)."""

    def __init__(self, source: ports.NodeMetricsSource) -> None:
        self._source = source

    def __call__(self, snapshot: fleet.FleetSnapshot) -> Mapping[str, CardFacts]:
        cards = waiting(snapshot)
        if not cards:
            return {}
        try:
            samples = self._source.samples_of(snapshot.taken_at, sorted(cards))
        except SourceError as e:
            log.warning("GPU reset facts unreadable (no reset this tick): %s", e)
            return {}
        return {node: card_facts(uuid, _of(node, samples)) for node, uuid in cards.items()}


def scoped(reader: prometheus.PrometheusSource) -> node_scope.ScopedSource:
    """The card facts' queries over Prometheus, scoped to the asked nodes."""
    return node_scope.ScopedSource(reader, ResetCardsPlan)


def _of(node: str, samples: Sequence[fleet.MetricSample]) -> list[fleet.MetricSample]:
    return [s for s in samples if node_of(s.labels) == node]
