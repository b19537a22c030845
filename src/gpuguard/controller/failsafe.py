"""Fail closed, never crash: one step of a tick (or one node within a step) that raises an
exception nobody handled does nothing this tick, is logged with what it was working on, and is
counted (``gpuguard_tick_errors_total{kind="internal", step}``); the loop goes on.

Both replicas read the same cluster and the same Prometheus: an input that crashes the leader
would crash the standby next, so a bad input must cost only the step (or node) it reached.
Doing nothing is the safe side here: no isolation, no return, no Job (docs/operations.md).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TypeVar

from gpuguard.model import annotation_keys, decisions, faults, fleet
from gpuguard.model import settings as settings_model
from gpuguard.policy import isolate, xid_signals

log = logging.getLogger(__name__)
T = TypeVar("T")

StepErrors = list[tuple[str, str]]
"""``(step, what failed: the node or input, and the exception)`` of one tick."""


_SEEN_LIMIT = 10_000
_seen: set[str] = set()


def first_time(message: str) -> bool:
    """Whether ``message`` is new to this process: a bad input that stays (a malformed
    annotation) is logged once at its level, then every tick at DEBUG, not every 30 s."""
    if message in _seen:
        return False
    if len(_seen) >= _SEEN_LIMIT:
        _seen.clear()
    _seen.add(message)
    return True


def guarded(step: str, subject: str, errors: StepErrors, run: Callable[[], T], default: T) -> T:
    """``run()``, or ``default`` when it raised; the failure is logged and added to ``errors``."""
    try:
        return run()
    except Exception as e:  # the loop must outlive any input
        message = f"{subject}: {type(e).__name__}: {e}"
        level = logging.ERROR if first_time(f"{step} {message}") else logging.DEBUG
        log.log(level, "step %s failed closed (nothing done) for %s", step, message, exc_info=True)
        errors.append((step, message))
        return default


def isolate_sparing_others(
    snapshot: fleet.FleetSnapshot,
    classifier: xid_signals.XidClassifier,
    settings: settings_model.GuardSettings,
    errors: StepErrors,
    phantom_cordons: Sequence[decisions.Action] = (),
    ledger: Sequence[faults.LedgerEntry] | None = (),
    signals: Mapping[str, list[xid_signals.HardwareXid]] | None = None,
) -> isolate.IsolationDecision:
    """The isolation decision; when it raises, each node is decided alone to find the ones
    whose input raises, and the fleet is decided again without them — one node's bad input
    costs that node, not every other node's protection. An excluded node that gpuguard holds
    still counts against the breaker: it stays in the fleet with only the marks the breaker
    reads (``policy.admission.history``), so it can neither raise again nor make room.
    ``signals`` (the whole snapshot's) serve the first decision only."""
    decide = partial(isolate.decide, classifier=classifier, settings=settings,
                     phantom_cordons=phantom_cordons, ledger=ledger)  # fmt: skip
    try:
        return decide(snapshot, signals=signals)
    except Exception:
        culprits = [n for n in snapshot.nodes if not _decides(snapshot, n, classifier, settings)]
        if not culprits or len(culprits) == len(snapshot.nodes):
            raise  # not some nodes' input: the step fails closed as a whole
    for node in culprits:
        marks = {k: v for k, v in node.annotations.items() if annotation_keys.is_gpuguard_key(k)}
        alone = partial(isolate.decide, _alone(snapshot, node), classifier, settings)
        guarded("isolate", f"node {node.name} (annotations {marks})", errors, alone, None)
    excluded = {n.name for n in culprits}
    rest = _only(snapshot, {n.name for n in snapshot.nodes} - excluded)
    held = tuple(_history_only(n) for n in culprits if isolate.is_auto_isolated(n))
    return decide(dataclasses.replace(rest, nodes=rest.nodes + held))


_HISTORY_MARKS = (annotation_keys.ISOLATED_AT, annotation_keys.VERDICT, annotation_keys.HOLD)


def _history_only(node: fleet.Node) -> fleet.Node:
    """The node as the breaker counts it, and nothing else of its input."""
    kept = {k: v for k, v in node.annotations.items() if k in _HISTORY_MARKS}
    return dataclasses.replace(node, annotations=kept)


def _alone(snapshot: fleet.FleetSnapshot, node: fleet.Node) -> fleet.FleetSnapshot:
    return _only(snapshot, {node.name})


def _only(snapshot: fleet.FleetSnapshot, names: set[str]) -> fleet.FleetSnapshot:
    """The snapshot of these nodes: their objects, pods and series (and the fleet's own)."""
    return dataclasses.replace(
        snapshot,
        nodes=tuple(n for n in snapshot.nodes if n.name in names),
        pods=tuple(p for p in snapshot.pods if p.node in names),
        samples=tuple(s for s in snapshot.samples
                      if (node := xid_signals.node_of(s.labels)) is None or node in names),
    )  # fmt: skip


def _decides(
    snapshot: fleet.FleetSnapshot,
    node: fleet.Node,
    classifier: xid_signals.XidClassifier,
    settings: settings_model.GuardSettings,
) -> bool:
    try:
        isolate.decide(_alone(snapshot, node), classifier, settings)
    except Exception:  # that node's input raises
        return False
    return True
