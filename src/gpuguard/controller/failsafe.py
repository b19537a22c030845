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
