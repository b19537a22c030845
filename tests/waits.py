"""A polling wait for what announces no event (another process's state, a server's counters):
``eventually(predicate, timeout_s)`` re-checks ``predicate`` until it holds or ``timeout_s``
has passed, and says which. Deadlines are upper bounds for a loaded 2-core CI machine; a
passing test returns as soon as the predicate holds. Where an event or a condition variable
exists (``WatchCache.wait_until``, ``threading.Condition``), wait on it instead."""

from __future__ import annotations

import time
from collections.abc import Callable


def eventually(predicate: Callable[[], bool], timeout_s: float, every_s: float = 0.05) -> bool:
    """Whether ``predicate()`` held within ``timeout_s`` (checked every ``every_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(every_s)
