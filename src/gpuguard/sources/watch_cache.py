"""An informer-style cache of one kind: a paged list, then a watch from its resourceVersion,
kept on a daemon thread (docs/design.md#fast-path).

The loop is client-go's reflector's (``k8s.io/client-go/tools/cache/reflector.go``,
``ListAndWatch``), re-told small: list (paged) and replace the cache; watch from the list's
resourceVersion with bookmarks and a randomized 5–10 min ``timeoutSeconds``; apply ADDED,
MODIFIED and DELETED to the cache and move its resourceVersion on every event (BOOKMARK
included); a watch the server ends is resumed at once from the last resourceVersion; a broken
one (or one that ended within a second without an event) is resumed after a backoff; a 410
(the resourceVersion is older than the server keeps) means list again. The cache holds slim
model objects only, never the API's JSON.

Each change (a watch event, or an object a re-list found different) is passed to
``on_change(before, after)``; the first list calls nothing — the first tick looks at every
object anyway.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from gpuguard.clients import kube_lists
from gpuguard.errors import SourceError

log = logging.getLogger(__name__)

T = TypeVar("T")
Converter = Callable[[Mapping[str, Any]], T]
MIN_WATCH_S = 300  # client-go's minWatchTimeout; each watch asks for 1–2 times this
SHORT_WATCH_S = 1.0  # a watch that ends this soon with no event failed


def watch_timeout() -> int:
    """A watch's ``timeoutSeconds``: randomized in [5, 10) min as client-go does, so a fleet
    of watchers does not reconnect at one instant."""
    return int(MIN_WATCH_S * (1 + random.random()))


def retry_after(failures: int) -> float:
    """Seconds before the next attempt after ``failures`` failures in a row: 0.8 s doubling to
    30 s (client-go's reflector backoff)."""
    return float(min(0.8 * 2.0 ** max(failures - 1, 0), 30.0))


def object_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` (``name`` for a cluster-scoped object), as client-go keys its store."""
    meta = obj.get("metadata") or {}
    namespace, name = meta.get("namespace"), str(meta.get("name") or "")
    return f"{namespace}/{name}" if namespace else name


@dataclass(frozen=True, slots=True)
class CacheState:
    """What the cache can say about itself (for the metrics and the staleness rule)."""

    resource: str
    synced: bool  # a list has filled it
    objects: int
    resource_version: str
    relists: int  # lists done, the first one included
    watch_errors: int
    last_relist: float | None  # monotonic seconds of the last completed list
    broken_since: float | None  # monotonic seconds since the list or watch has been failing


class WatchCache(Generic[T]):
    """The cache of one ``kube_lists.Resource``; ``start()`` its thread, ``stop()`` it."""

    def __init__(
        self,
        api: kube_lists.RawApi,
        resource: kube_lists.Resource,
        convert: Converter[T],
        *,
        on_change: Callable[[T | None, T], None] | None = None,
        page_size: int = kube_lists.PAGE_SIZE,
        timeout: Callable[[], int] = watch_timeout,
        backoff: Callable[[int], float] = retry_after,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.resource = resource
        self._api, self._convert, self._on_change = api, convert, on_change
        self._page_size, self._timeout, self._backoff = page_size, timeout, backoff
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._objects: dict[str, T] = {}
        self._version = ""
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._relists = self._errors = 0
        self._last_relist: float | None = None
        self._broken_since: float | None = None
        self.changed = threading.Condition()  # notified on every change of objects or state

    def start(self) -> None:
        name = f"watch-{self.resource.plural.lower()}"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def stop(self, join_s: float = 0.0) -> None:
        """Ask the thread to end, waiting at most ``join_s`` for it: a watch blocked on a
        quiet stream ends when the server ends it, or with the process (a daemon thread)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(join_s)

    def join(self, timeout_s: float) -> bool:
        """Whether the thread (asked to ``stop``) ended within ``timeout_s``."""
        if self._thread is not None:
            self._thread.join(timeout_s)
        return self._thread is None or not self._thread.is_alive()

    def wait_synced(self, timeout_s: float) -> bool:
        return self._synced.wait(timeout_s)

    def wait_until(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until ``predicate()`` holds, re-checked on every change of the cache."""
        with self.changed:
            return self.changed.wait_for(predicate, timeout_s)

    def holds(self, resource_version: str, timeout_s: float) -> bool:
        """Whether the cache reached ``resource_version`` (a write of this kind) within
        ``timeout_s``: read-your-writes. Versions are compared as integers, which etcd's
        revisions are; one that is not an integer is never held (the reader lists instead)."""
        return self.wait_until(lambda: _at_least(self.state().resource_version,
                                                 resource_version), timeout_s)  # fmt: skip

    def values(self) -> tuple[T, ...]:
        with self._lock:
            return tuple(self._objects.values())

    def fresh(self, stale_after_s: float) -> bool:
        """Synced, and its list or watch not failing for longer than ``stale_after_s``."""
        state = self.state()
        if not state.synced:
            return False
        broken = state.broken_since
        return broken is None or self._monotonic() - broken <= stale_after_s

    def state(self) -> CacheState:
        with self._lock:
            return CacheState(
                resource=self.resource.plural,
                synced=self._synced.is_set(),
                objects=len(self._objects),
                resource_version=self._version,
                relists=self._relists,
                watch_errors=self._errors,
                last_relist=self._last_relist,
                broken_since=self._broken_since,
            )

    def _run(self) -> None:
        failures, must_list = 0, True
        while not self._stop.is_set():
            try:
                if must_list:
                    self._relist()
                    must_list = False
                self._watch()
                failures = 0  # the server ended the watch: resume at once
            except kube_lists.Expired as e:
                log.info("%s: %s; listing again", self.resource.plural, e)
                must_list = True
            except Exception as e:  # any failure, a bug too, must make the cache read as broken
                if self._stop.is_set():
                    return  # stopped: its connection was closed under it
                failures += 1
                self._broken(e)
                self._stop.wait(self._backoff(failures))

    def _relist(self) -> None:
        listed = self._api.list_all(self.resource, _keyed(self._convert), self._page_size)
        fresh = dict(listed.items)
        with self._lock:
            before, first = self._objects, not self._synced.is_set()
            self._objects = fresh
            self._relists += 1
            self._last_relist, self._broken_since = self._monotonic(), None
        if not first and self._on_change is not None:
            for key, after in fresh.items():
                if (was := before.get(key)) != after:
                    self._notify(was, after)
        self._reached(listed.resource_version)
        self._synced.set()
        log.info("%s: listed %d in %d page(s) at resourceVersion %s", self.resource.plural,
                 len(fresh), listed.pages, listed.resource_version)  # fmt: skip
        self._announce()

    def _watch(self) -> None:
        with self._lock:
            since = self._version
        began, events = self._monotonic(), 0
        for event in self._api.watch(self.resource, since, self._timeout(), self._healthy):
            events += 1
            self._apply(event)
            if self._stop.is_set():
                return
        if events == 0 and self._monotonic() - began < SHORT_WATCH_S:
            # client-go's reflector treats this as an error too: resuming at once would spin
            raise SourceError(f"watching {self.resource.plural}: the server ended the watch "
                              f"within {SHORT_WATCH_S:.0f} s without an event")  # fmt: skip

    def _apply(self, event: kube_lists.Event) -> None:
        version = event.resource_version
        if event.type == "BOOKMARK":
            with self._lock:
                self._version = version or self._version
            return
        key = object_key(event.object)
        if event.type == "DELETED":
            with self._lock:
                self._objects.pop(key, None)
            self._reached(version)
            self._announce()
            return
        after = self._converted(event)
        with self._lock:
            before = self._objects.get(key)
            if after is not None:
                self._objects[key] = after
        if after is not None:
            self._notify(before, after)
        self._reached(version)
        self._announce()

    def _reached(self, version: str) -> None:
        """The cache holds everything through ``version``: set only once the change hooks
        ran, so whoever waited for it (``holds``) also sees what they did (a wake)."""
        with self._lock:
            self._version = version or self._version

    def _converted(self, event: kube_lists.Event) -> T | None:
        try:
            return self._convert(event.object)
        except SourceError as e:  # one bad object must not stop the cache of all the others
            log.warning("%s: %s event skipped: %s", self.resource.plural, event.type, e)
            with self._lock:
                self._errors += 1
            return None

    def _notify(self, before: T | None, after: T) -> None:
        if self._on_change is None:
            return
        try:
            self._on_change(before, after)
        except Exception:  # a hook's bug must not end the cache: log it, keep watching
            log.exception("%s: change hook failed", self.resource.plural)

    def _healthy(self) -> None:
        with self._lock:
            was, self._broken_since = self._broken_since, None
        if was is not None:
            self._announce()

    def _broken(self, error: Exception) -> None:
        """A failed list or watch: counted, and the cache's age starts to count against it."""
        if isinstance(error, SourceError):
            log.warning("%s: watch broken (resuming after a backoff): %s", self.resource.plural,
                        error)  # fmt: skip
        else:
            log.error("%s: watch failed: %s: %s", self.resource.plural, type(error).__name__,
                      error, exc_info=error)  # fmt: skip
        with self._lock:
            self._errors += 1
            if self._broken_since is None:
                self._broken_since = self._monotonic()
        self._announce()

    def _announce(self) -> None:
        with self.changed:
            self.changed.notify_all()


def _keyed(convert: Converter[T]) -> Callable[[Mapping[str, Any]], tuple[str, T]]:
    return lambda obj: (object_key(obj), convert(obj))


def _at_least(have: str, want: str) -> bool:
    try:
        return int(have) >= int(want)
    except ValueError:
        return False
