"""What this process is waiting on now, named by the adapter that waits (a Kubernetes request,
a Prometheus query), so a command's overall deadline (``cli.deadline``) can say what it was
waiting on when it ran out, not just that it did.

Per thread and per task (a ``ContextVar``): the controller's watch threads name their own waits
without touching the main thread's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

_WAITING: ContextVar[tuple[str, ...]] = ContextVar("gpuguard_waiting", default=())


@contextlib.contextmanager
def on(what: str) -> Iterator[None]:
    """Name the wait for the block (``listing Nodes``, ``Prometheus query '...'``)."""
    token = _WAITING.set((*_WAITING.get(), what))
    try:
        yield
    finally:
        _WAITING.reset(token)


def current() -> str | None:
    """The innermost wait in progress, None when nothing named is waited on."""
    waiting = _WAITING.get()
    return waiting[-1] if waiting else None
