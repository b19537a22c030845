"""The storm breaker: which isolation candidates of this tick may be acted on, and why the
others are withheld (docs/breaker.md has the defaults and their arithmetic).

A breaker must stop a bad metric from cordoning a fleet, yet never stop the guard because
nodes wait weeks for a card. So it counts only what a storm produces — isolations whose fault
the evidence did not confirm — and three limits apply, in this order:

- *tripped*: once many candidates appear at one instant (the signature of a bad metric or a
  shared cause) the breaker trips: it admits at most ``breaker_burst_admit`` of them and from
  then on nothing new, until the withheld candidates clear or a person runs
  ``gpuguard breaker reset``. The trip is durable: it is the ``gpuguard.io/withheld`` mark it
  leaves on the nodes it withheld, so a restart or a new leader does not forget it, and no
  window expiring drains the fleet one window at a time;
- *rate*: unconfirmed isolations started within ``breaker_window``;
- *level*: unconfirmed isolations still out of service, whatever their age.

An isolation stops counting once its evidence confirmed the fault (a repair verdict was
recorded) or a person holds the node (``gpuguard.io/hold``). Every limit has a small-fleet
floor, so a fleet of a few nodes can always isolate two unrelated faults.

Pure: the isolation history is read from gpuguard's own node annotations; no clock, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from gpuguard.model import (
    change,
    decisions,
    fleet,
    node_marks,
    timestamps,
)
from gpuguard.model import settings as settings_model

Reason = decisions.Reason

CONFIRMING_VERDICTS = frozenset(
    {decisions.Verdict.POWER_CYCLE, decisions.Verdict.GPU_RESET, decisions.Verdict.RMA}
)
"""Verdicts for which the evidence found the fault. ``human-diagnosis`` is not one: the
evidence did not show it, which is what a bad metric looks like."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node the policies would isolate now; lower ``rank`` goes first (then the name)."""

    node: str
    rank: int


@dataclass(frozen=True, slots=True)
class Isolation:
    """One isolation gpuguard made that still holds, as its node's marks tell it."""

    node: str
    at: datetime | None  # None: the mark is unreadable, counted as recent
    confirmed: bool
    change: bool = False  # out for a declared change: counts in the level, never the rate


@dataclass(frozen=True, slots=True)
class Limits:
    rate: int
    level: int
    burst: int
    burst_admit: int

    @classmethod
    def for_fleet(cls, gpu_nodes: int, isolation: settings_model.IsolationSettings) -> Limits:
        level = max(
            isolation.breaker_level_min, math.floor(isolation.breaker_level_fraction * gpu_nodes)
        )
        if isolation.breaker_level_max_nodes is not None:
            level = min(level, isolation.breaker_level_max_nodes)
        return cls(
            rate=max(
                isolation.breaker_rate_min, math.floor(isolation.breaker_rate_fraction * gpu_nodes)
            ),
            level=level,
            burst=max(
                isolation.breaker_burst_min, math.ceil(isolation.breaker_burst_fraction * gpu_nodes)
            ),
            burst_admit=isolation.breaker_burst_admit,
        )


@dataclass(frozen=True, slots=True)
class BreakerState:
    """The breaker as this tick found it (before its own isolations)."""

    gpu_nodes: int
    limits: Limits
    recent_unconfirmed: int
    unconfirmed: int
    confirmed_or_held: int
    candidates: int
    tripped_since: datetime | None
    tripped_now: bool = False

    @property
    def tripped(self) -> bool:
        return self.tripped_since is not None or self.tripped_now

    @property
    def open(self) -> bool:
        """No room for a new isolation: tripped, or the rate or level limit reached."""
        return self.tripped or self.room == 0

    @property
    def room(self) -> int:
        return max(
            0,
            min(self.limits.rate - self.recent_unconfirmed, self.limits.level - self.unconfirmed),
        )

    def describe(self) -> str:
        if self.tripped_now:
            state = f"TRIPPED now ({self.candidates} candidates at once >= {self.limits.burst})"
        elif self.tripped_since is not None:
            state = f"TRIPPED since {self.tripped_since:%Y-%m-%d %H:%M:%S}Z"
        else:
            state = "OPEN" if self.open else "closed"
        return (
            f"breaker {state}: unconfirmed isolations {self.recent_unconfirmed}/"
            f"{self.limits.rate} in the window, {self.unconfirmed}/{self.limits.level} out;"
            f" {self.confirmed_or_held} confirmed or held (not counted); {self.gpu_nodes} GPU nodes"
        )


@dataclass(frozen=True, slots=True)
class Admission:
    admitted: tuple[str, ...]
    withheld: tuple[tuple[str, Reason], ...]
    state: BreakerState


def history(nodes: Iterable[fleet.Node]) -> tuple[Isolation, ...]:
    """gpuguard's isolations that still hold (cordoned, marked), from node annotations only.
    A node whose ``isolated-at`` cannot be read counts as unconfirmed and recent: an unknown
    age must never make room for more isolations. Marks gpuguard did not write
    (``Isolation.FOREIGN``, as the return step and ``explain`` read them) are no isolation of
    gpuguard's and fill none of the breaker's room: forged marks cannot withhold a real fault."""
    out = []
    for node in nodes:
        marks = node.marks
        if marks.isolation is node_marks.Isolation.FOREIGN:
            continue  # forged marks never fill the breaker, not even its GPU isolations
        if not node.isolated_by_gpuguard:
            out += _gpu_isolations(node)
            if change.out_for_change(node):
                out.append(Isolation(node.name, None, confirmed=False, change=True))
            continue
        at = timestamps.parse_utc(marks.isolated_at)
        confirmed = marks.hold is not None or marks.verdict in {
            str(v) for v in CONFIRMING_VERDICTS
        }
        out.append(Isolation(node.name, at, confirmed))
    return tuple(out)


def _gpu_isolations(node: fleet.Node) -> list[Isolation]:
    """A node serving with isolated GPUs counts as one isolation, as recent as its latest GPU
    one, confirmed once the kernel log showed every GPU's fault (the isolation Job reads it)
    or a person holds the node (docs/breaker.md#gpu-isolations)."""
    entries = node.marks.gpus
    if not entries:
        return []
    confirmed = node.marks.hold is not None or all(e.confirmed for e in entries)
    return [Isolation(node.name, max(e.at for e in entries), confirmed)]


def tripped_since(nodes: Iterable[fleet.Node]) -> datetime | None:
    """When the breaker tripped: the earliest trip mark a node still carries."""
    marks = [m for n in nodes if (m := n.marks.withheld) is not None and m.tripped]
    return min((m.since for m in marks), default=None)


def admit(
    candidates: Sequence[Candidate],
    isolations: Sequence[Isolation],
    tripped_at: datetime | None,
    gpu_nodes: int,
    isolation: settings_model.IsolationSettings,
    now: datetime,
) -> Admission:
    """Admitted candidates (in order) and withheld ones with the limit that withheld them."""
    state = _state(candidates, isolations, tripped_at, gpu_nodes, isolation, now)
    ordered = sorted(candidates, key=lambda c: (c.rank, c.node))
    if state.tripped_since is not None:
        return Admission((), tuple((c.node, Reason.BREAKER_TRIPPED) for c in ordered), state)
    room = min(state.room, isolation.max_isolations_per_tick)
    if state.tripped_now:
        room = min(room, state.limits.burst_admit)
    admitted = tuple(c.node for c in ordered[:room])
    why = _withheld_reason(state, len(admitted))
    return Admission(admitted, tuple((c.node, why) for c in ordered[room:]), state)


def _state(
    candidates: Sequence[Candidate],
    isolations: Sequence[Isolation],
    tripped_at: datetime | None,
    gpu_nodes: int,
    isolation: settings_model.IsolationSettings,
    now: datetime,
) -> BreakerState:
    limits = Limits.for_fleet(gpu_nodes, isolation)
    unconfirmed = [i for i in isolations if not i.confirmed]
    start = now - isolation.breaker_window
    recent = [i for i in unconfirmed if not i.change and (i.at is None or i.at > start)]
    return BreakerState(
        gpu_nodes=gpu_nodes,
        limits=limits,
        recent_unconfirmed=len(recent),
        unconfirmed=len(unconfirmed),
        confirmed_or_held=len(isolations) - len(unconfirmed),
        candidates=len(candidates),
        tripped_since=tripped_at,
        tripped_now=tripped_at is None and len(candidates) >= limits.burst,
    )


def _withheld_reason(state: BreakerState, admitted: int) -> Reason:
    """The limit that keeps the rest out, counting this tick's own isolations."""
    if state.tripped_now:
        return Reason.BREAKER_TRIPPED
    if state.limits.level - state.unconfirmed - admitted <= 0:
        return Reason.BREAKER_LEVEL
    if state.limits.rate - state.recent_unconfirmed - admitted <= 0:
        return Reason.BREAKER_RATE
    return Reason.TICK_LIMIT
