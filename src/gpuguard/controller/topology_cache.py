"""The agent's GPU topology, kept between fleet-health runs (docs/fleet-health.md#topology).

The agent re-reads ``nvidia-smi topo -m`` every few hours and the matrix changes only with the
hardware, so reading every node's NVLink pairs every minute is most of what a healthy fleet's
fleet-health answers weigh. This keeps the last answer per node: it reads every node's
topology at most every ``refresh``, and in between only the nodes asked about that it has none
for (new nodes, or nodes whose last answer was empty), scoped to them. With ``changes`` (the
nodes whose topology series appeared or vanished over its lookback,
``sources.fleet_health.TopologyChangesPlan``) asked each run, a node whose matrix changed is
forgotten and read again on its own at once; when the runs' checks leave a gap longer than
that lookback, or the nodes to be read on their own need more than ``most_batches`` batches of
node matchers (``sources.node_scope.MOST_BATCHES``), every node is read again.

Never a stale matrix beyond a bound: a node's answer is kept at most ``2 × refresh`` (a failed
fleet-wide read is retried every run until then); past it the node's topology is unknown, as if
the agent published none, and ``policy.topology`` gives no finding there. A restart or a new
leader starts empty and reads every node on its first run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gpuguard.errors import SourceError
from gpuguard.model import ports
from gpuguard.policy import topology
from gpuguard.sources import node_scope

log = logging.getLogger(__name__)

@dataclass(frozen=True, slots=True)
class _Answer:
    matrix: topology.NodeTopology
    read_at: datetime


@dataclass
class TopologyCache:
    """``every``: the topology plan of every node (``sources.fleet_health.TopologyPlan()``);
    ``scoped``: the same plan for some nodes (``node_scope.ScopedSource``)."""

    every: ports.MetricsSource
    scoped: ports.NodeMetricsSource
    refresh: timedelta
    changes: ports.MetricsSource | None = None
    changes_cover: timedelta = timedelta(0)  # the lookback of ``changes``' query
    most_batches: int = node_scope.MOST_BATCHES  # past it, the whole fleet is read instead
    _kept: dict[str, _Answer] = field(default_factory=dict)
    _read_every_at: datetime | None = None
    _checked_at: datetime | None = None  # changes up to here are accounted for

    def matrices(
        self, at: datetime, nodes: Iterable[str], unchecked: list[str]
    ) -> dict[str, topology.NodeTopology]:
        """The matrices of ``nodes`` (those known), read or kept, parsed once per read; what
        could not be read is appended to ``unchecked``."""
        wanted = set(nodes)
        read_every = self._refresh_due(at) and self._read_every(at, unchecked)
        if not read_every:
            self._forget_changed(at, unchecked)
        self._kept = {n: a for n, a in self._kept.items() if at - a.read_at < 2 * self.refresh}
        missing = sorted(wanted - set(self._kept))
        if missing and not read_every:
            many = len(node_scope.batches(missing, node_scope.MATCHER_CHARS)) > self.most_batches
            if not (many and self._read_every(at, unchecked)):
                self._read_scoped(at, missing, unchecked)
        return {n: self._kept[n].matrix for n in wanted & self._kept.keys()}

    def _refresh_due(self, at: datetime) -> bool:
        if self._read_every_at is None or at - self._read_every_at >= self.refresh:
            return True
        unseen = self._checked_at is None or at - self._checked_at > self.changes_cover
        return self.changes is not None and unseen

    def _forget_changed(self, at: datetime, unchecked: list[str]) -> None:
        """Drop the nodes whose topology series changed lately (kept answers stand when the
        check fails, within their bound)."""
        if self.changes is None:
            return
        if not self._kept:  # nothing that could be stale
            self._checked_at = at
            return
        try:
            answer = self.changes.samples(at)
        except SourceError as e:
            log.warning("GPU topology changes not checked: %s", e)
            unchecked.append(f"topology: change check refused ({e})")
            return
        changed = {s.labels.get("node", "") for s in answer}
        self._kept = {n: a for n, a in self._kept.items() if n not in changed}
        self._checked_at = at

    def _read_every(self, at: datetime, unchecked: list[str]) -> bool:
        """Every node's topology in place of what is kept; False when the read failed."""
        try:
            answer = self.every.samples(at)
        except SourceError as e:
            log.warning("GPU topology not refreshed (kept answers stay usable until %s old): %s",
                        2 * self.refresh, e)  # fmt: skip
            unchecked.append(f"topology: fleet-wide refresh refused ({e}); answers are kept "
                             f"until {2 * self.refresh} old")  # fmt: skip
            return False
        self._kept = {n: _Answer(m, at) for n, m in topology.from_samples(answer).items()}
        self._read_every_at = self._checked_at = at
        return True

    def _read_scoped(self, at: datetime, nodes: list[str], unchecked: list[str]) -> None:
        try:
            answer = self.scoped.samples_of(at, nodes)
        except SourceError as e:
            log.warning("GPU topology of %d node(s) not read: %s", len(nodes), e)
            unchecked.append(f"topology: {len(nodes)} node(s) unread ({e})")
            return
        read = topology.from_samples(answer)
        self._kept |= {n: _Answer(m, at) for n, m in read.items() if n in nodes}

