"""``gpuguard breaker reset``: a person ends a trip of the storm breaker.

The trip is the ``breaker-tripped`` withheld marks on the nodes (``model.withheld``); a reset
removes them, each with an Event saying who reset it. Nothing stale is replayed: the next tick
judges the nodes from current facts only — a fault that still holds is a candidate again, and
if as many candidates still appear at once, the breaker trips again.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import datetime

from gpuguard.errors import GpuguardError
from gpuguard.model import decisions, fleet, ports, withheld


@dataclass(frozen=True, slots=True)
class ResetOutcome:
    reset: tuple[str, ...]
    failed: tuple[tuple[str, str], ...]


def tripped_nodes(nodes: tuple[fleet.Node, ...]) -> tuple[fleet.Node, ...]:
    return tuple(n for n in nodes if (m := n.marks.withheld) is not None and m.tripped)


def reset(
    reader: ports.ClusterReader,
    writer: ports.ClusterWriter,
    *,
    who: str,
    now: datetime,
    dry_run: bool,
) -> ResetOutcome:
    done: list[str] = []
    failed: list[tuple[str, str]] = []
    for node in tripped_nodes(reader.nodes()):
        if dry_run:
            done.append(node.name)
            continue
        try:
            writer.annotate(node, {withheld.KEY: None})
        except GpuguardError as e:  # reported per node; the others still reset
            failed.append((node.name, str(e)))
            continue
        done.append(node.name)
        action = decisions.Action(
            kind=decisions.ActionKind.ANNOTATE,
            node=node.name,
            reason=decisions.Reason.BREAKER_RESET,
            detail=f"breaker reset by {who}: the next tick judges this node from current facts",
        )
        with contextlib.suppress(GpuguardError):  # the reset is done; the Event is a courtesy
            writer.record_event(action, now)
    return ResetOutcome(tuple(done), tuple(failed))
