"""One overall deadline per command: a one-shot command that reads the cluster (``status``,
``gate``, ``ledger list``, ...) ends within ``--deadline`` (default 15 s, or
``GPUGUARD_DEADLINE``) with one line naming what it was waiting on, exit 1 — however many
requests it makes one after another, each with its own 10 s read timeout (an API server that
never answers cost ``status`` two of them: 22 s).

The deadline is the process's real-time interval timer (``signal.setitimer``); when it fires,
``DeadlineExceeded`` is raised in the main thread wherever it waits (a blocking socket read is
interrupted: PEP 475 retries it only after the handler returned without raising). It derives
from ``BaseException``, as ``KeyboardInterrupt`` does, so no ``except Exception`` on the way
that turns a failed read into "unknown" (and goes on to the next read) can swallow it;
``cli.failures`` turns it into the one line. What it waited on is the innermost wait an adapter
named (``model.waits``), else the HTTP request in progress, read from the interrupted frames.

Long-running commands (``run``, ``agent``, ``sim serve``, ``demo``, ``burnin``, ``backtest``,
...) and offline ones have no deadline: only ``COMMANDS``.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from types import FrameType

from gpuguard import cli
from gpuguard.model import durations, waits

DEFAULT = timedelta(seconds=15)
LONGEST = timedelta(hours=1)
ENV = "GPUGUARD_DEADLINE"
COMMANDS = frozenset({
    "status", "explain", "once", "gate", "health", "audit", "hygiene", "phantom",
    "utilization", "ledger", "breaker",
})  # fmt: skip
"""The commands (or groups) that get the deadline: one-shot reads (and writes) of the cluster."""


class DeadlineExceeded(BaseException):  # KeyboardInterrupt's kind: no except Exception catches it
    """The command's overall deadline ran out; the message says what it was waiting on."""


@dataclass
class _Start:
    at: float = cli.STARTED  # time.monotonic() of the command line's start


_START = _Start()


def begin(*, process: bool) -> None:
    """A command line starts (``cli.failures``): run as the ``gpuguard`` program (``process``)
    it counts from the process's start, its imports included (``cli.STARTED``); invoked in a
    running program (a test's runner), from now."""
    _START.at = cli.STARTED if process else time.monotonic()


def arm(command: str, limit: timedelta) -> None:
    """Start ``command``'s deadline, ``limit`` from the command line's start (``begin``), in
    the main thread only: signals are delivered there."""
    if threading.current_thread() is not threading.main_thread():
        return
    seconds = max(limit.total_seconds() - (time.monotonic() - _START.at), 0.001)
    shown = durations.format_duration(limit)

    def expire(signum: int, frame: FrameType | None) -> None:
        disarm()
        waited = waits.current() or _request_in(frame) or "nothing named (local work)"
        raise DeadlineExceeded(
            f"gpuguard {command}: no result within its {shown} deadline (--deadline, "
            f"{ENV}); it was waiting on {waited}"
        )

    signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)


def disarm() -> None:
    if threading.current_thread() is threading.main_thread():
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)


def _request_in(frame: FrameType | None) -> str | None:
    """The HTTP request the interrupted frames hold, as method and URL without its query: the
    outermost ``Request`` (the client's, httpx's or lightkube's; the transport's below it has
    the same URL in bytes)."""
    found = None
    while frame is not None:
        for value in frame.f_locals.values():
            url, method = getattr(value, "url", None), getattr(value, "method", None)
            if type(value).__name__ == "Request" and isinstance(method, str) and url is not None:
                found = f"{method} {str(url).split('?', 1)[0]}"
        frame = frame.f_back
    return found
