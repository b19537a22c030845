"""What the simulated API server was asked, and the failures a test wants it to give.

Adapters are tested over real HTTP, but a test still needs to say "the isolation was ONE
merge patch" or "the next PATCH on this node answers 500": the server records every request
here and consults the injected failures before it touches the store.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str  # without the query string
    query: dict[str, str]
    content_type: str
    body: Any  # parsed JSON; None without a body (or when it was not JSON)


@dataclass
class InjectedFailure:
    """Answer the next ``times`` requests of ``method`` on ``path`` with ``status``."""

    method: str
    path: str  # the request path, exactly (``/api/v1/nodes/gpu-1``)
    status: int
    reason: str
    times: int


class Audit:
    """Thread-safe request log and failure queue shared by the server's connections."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._failures: list[InjectedFailure] = []

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def inject(self, failure: InjectedFailure) -> None:
        with self._lock:
            self._failures.append(failure)

    def take_failure(self, method: str, path: str) -> InjectedFailure | None:
        """The first pending failure for this request, counted as used."""
        with self._lock:
            for failure in self._failures:
                if (failure.method, failure.path) == (method, path) and failure.times > 0:
                    failure.times -= 1
                    return failure
            return None
