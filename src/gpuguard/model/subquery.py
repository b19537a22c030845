"""Subquery and range-selector windows that Prometheus 2.x and 3.x answer alike.

Prometheus evaluates a subquery ``expr[R:S]`` at time ``t`` at the instants that are multiples
of ``S`` (counted from the Unix epoch) in the range that ends at ``t``. Whether an instant at
exactly ``t - R`` is one of them changed with the major version: 2.x starts at the first step
at or after ``t - R`` (promql/engine.go, ``if start < t-R { start += step }``), 3.x at the first
step after it ("promql: Fix subqueries to be really left-open", Prometheus 3.0.1;
docs/querying/basics.md: "The range is a left-open and right-closed interval"). On the step
grid that is one step more on 2.x — a hold window that is held one tick earlier.

The guard asks at whole seconds (``sources.prometheus``) with a range of the window plus half
a second: ``t - R`` then lies between two whole seconds, never on a step, and both versions
evaluate the same steps, those in ``[t - window, t]``. Range selectors (``x[R]``) moved from
closed to left-open in 3.0 too; with the same range, a sample stamped at a whole second is in
on both when it is in ``[t - window, t]`` (scrapes are stamped in milliseconds, so one at
exactly ``t - R`` is as rare as at any other millisecond).
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

MARGIN = timedelta(milliseconds=500)


def subquery_range(window: timedelta) -> timedelta:
    """The range ``R`` of ``expr[R:step]`` whose steps are those in ``[t - window, t]``."""
    return window + MARGIN


def promql_range(window: timedelta) -> str:
    """``subquery_range(window)`` in PromQL's duration syntax (whole milliseconds)."""
    return f"{round(subquery_range(window).total_seconds() * 1000)}ms"


def evaluation_time(at: datetime) -> float:
    """The whole second (Unix time) the guard asks Prometheus at for instant ``at``: the next
    one, so the answer holds every sample up to ``at``."""
    return float(math.ceil(at.timestamp()))
