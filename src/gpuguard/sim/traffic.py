"""How much the simulated API server was asked and answered: requests and response bytes,
per verb, per request path and per client (its User-Agent's product name, e.g. ``kubectl``).

A benchmark reads "API bytes per tick" from it: take ``snapshot()`` before and after a tick
and subtract. Verbs are the API server's audit verbs (``get``, ``list``, ``watch``,
``create``, ``update``, ``patch``, ``delete``; https://kubernetes.io/docs/reference/
access-authn-authz/authorization/#determine-the-request-verb). Bytes are what went on the wire
after the request line: status line, headers and body, a watch's chunks as they stream.
Counting is one lock and two additions per write.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

Key = tuple[str, str, str]  # (verb, path, client)


@dataclass(frozen=True)
class Usage:
    """Requests served and response bytes written."""

    requests: int = 0
    bytes: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.requests + other.requests, self.bytes + other.bytes)

    def __sub__(self, other: Usage) -> Usage:
        return Usage(self.requests - other.requests, self.bytes - other.bytes)


@dataclass(frozen=True)
class Snapshot:
    """The counters at one moment; ``by_request`` is keyed by (verb, path without query,
    client)."""

    by_request: Mapping[Key, Usage] = field(default_factory=dict)

    @property
    def total(self) -> Usage:
        return sum(self.by_request.values(), Usage())

    @property
    def by_verb(self) -> Mapping[str, Usage]:
        return _grouped(self.by_request, lambda key: key[0])

    @property
    def by_path(self) -> Mapping[str, Usage]:
        return _grouped(self.by_request, lambda key: key[1])

    @property
    def by_client(self) -> Mapping[str, Usage]:
        return _grouped(self.by_request, lambda key: key[2])

    def __sub__(self, earlier: Snapshot) -> Snapshot:
        """What was served between ``earlier`` and this snapshot."""
        delta = {k: v - earlier.by_request.get(k, Usage()) for k, v in self.by_request.items()}
        return Snapshot(MappingProxyType({k: v for k, v in delta.items() if v != Usage()}))

    def verb(self, verb: str) -> Usage:
        """One verb's usage (zero when it was not asked)."""
        return self.by_verb.get(verb, Usage())


def _grouped(by_request: Mapping[Key, Usage], part: Callable[[Key], str]) -> Mapping[str, Usage]:
    grouped: dict[str, Usage] = {}
    for key, usage in by_request.items():
        name = part(key)
        grouped[name] = grouped.get(name, Usage()) + usage
    return MappingProxyType(grouped)


class _Counter:
    __slots__ = ("bytes", "requests")

    def __init__(self) -> None:
        self.requests = 0
        self.bytes = 0


class Meter:
    """The live counters, shared by the server's connection threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[Key, _Counter] = {}

    def request(self, verb: str, path: str, client: str) -> _Counter:
        """Count one request; returns its counter, to add its response bytes to."""
        with self._lock:
            counter = self._counters.setdefault((verb, path, client), _Counter())
            counter.requests += 1
            return counter

    def add_bytes(self, counter: _Counter, count: int) -> None:
        with self._lock:
            counter.bytes += count

    def snapshot(self) -> Snapshot:
        with self._lock:
            frozen = {k: Usage(c.requests, c.bytes) for k, c in self._counters.items()}
        return Snapshot(MappingProxyType(frozen))

    def reset(self) -> None:
        """Count from zero again; a watch streaming now goes on counting its bytes."""
        with self._lock:
            for counter in self._counters.values():
                counter.requests = counter.bytes = 0
