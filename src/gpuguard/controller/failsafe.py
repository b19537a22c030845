"""Fail closed, never crash: one step of a tick (or one node within a step) that raises an
exception nobody handled does nothing this tick, is logged with what it was working on, and is
counted (``gpuguard_tick_errors_total{kind="internal", step}``); the loop goes on.

Both replicas read the same cluster and the same Prometheus: an input that crashes the leader
would crash the standby next, so a bad input must cost only the step (or node) it reached.
Doing nothing is the safe side here: no isolation, no return, no Job (docs/operations.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")

StepErrors = list[tuple[str, str]]
"""``(step, what failed: the node or input, and the exception)`` of one tick."""


def guarded(step: str, subject: str, errors: StepErrors, run: Callable[[], T], default: T) -> T:
    """``run()``, or ``default`` when it raised; the failure is logged and added to ``errors``."""
    try:
        return run()
    except Exception as e:  # the loop must outlive any input
        message = f"{subject}: {type(e).__name__}: {e}"
        log.exception("step %s failed closed (nothing done) for %s", step, message)
        errors.append((step, message))
        return default
