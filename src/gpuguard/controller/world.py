"""What every step of one tick reads: the tick's ``TickWorld``.

The guard collects it once at the start of a tick: the snapshot, the Xid signals of that
snapshot (``xid_signals.all_signals``, computed once, not per step), the fault ledger as this
tick sees it (``controller.tick_ledger``: read at most once, again only after a write), the
settings and the tick's instant. Steps read it and never change it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from gpuguard.actuators import ledger as ledger_store
from gpuguard.model import fleet, ports
from gpuguard.model import settings as settings_model
from gpuguard.policy import xid_signals

log = logging.getLogger(__name__)

Signals = Mapping[str, list[xid_signals.HardwareXid]]


@dataclass(frozen=True)
class TickWorld:
    """One tick's inputs. ``signals`` None: they could not be computed from this snapshot
    (each step that needs them computes its own and fails closed on its own). ``ledger`` None:
    the guard keeps no fault ledger. ``urgent``: a wake (docs/design.md#fast-path)."""

    now: datetime
    snapshot: fleet.FleetSnapshot
    signals: Signals | None
    ledger: ports.LedgerView[ledger_store.LedgerRead] | None
    settings: settings_model.GuardSettings
    urgent: bool = False


def signals_of(
    snapshot: fleet.FleetSnapshot, classifier: xid_signals.XidClassifier
) -> Signals | None:
    """The snapshot's signals, or None when some node's input makes them raise: the isolation
    step then decides node by node and reports the culprits (``failsafe``)."""
    try:
        return xid_signals.all_signals(snapshot, classifier)
    except Exception as e:  # reported by the step that computes them again
        log.debug("signals not computed once for the tick: %r", e)
        return None
