"""Two Kubernetes API servers asked the same requests: the simulator's and a real one.

``Api`` is one server behind one HTTP client (the same ``User-Agent`` for both, so both
record the same field manager); ``normal`` turns an answer into what a client may rely on:
server-generated values (uids, resourceVersion numbers, timestamps) become
placeholders, a continue token is decoded with its resourceVersion replaced, a Status's
causes are sorted (the real server lists an apply's conflicts in no set order), so two servers
that behave alike give equal transcripts. A sequence (``tests/realcluster/
test_api_differential.py``) is run once against each; its transcript is a list of
(step, observation) pairs compared step by step.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

USER_AGENT = "gpuguard-differential/1.0"
MANAGER = USER_AGENT.split("/", 1)[0]
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"
_PLACEHOLDERS = {"uid": "<uid>", "resourceVersion": "<rv>", "creationTimestamp": "<time>",
                 "time": "<time>", "lastTransitionTime": "<time>"}  # fmt: skip
_NUMBERS_IN_TOO_OLD = re.compile(r"too old resource version: \d+ \(\d+\)")
_STREAM_GRACE_S = 10.0

Step = tuple[str, Any]


class DifferentialError(AssertionError):
    """A server could not be brought to the state a sequence needs (e.g. no compaction)."""


@dataclass
class Api:
    """One API server under comparison. ``expire`` makes every resourceVersion read so far
    too old (a compaction); ``make_namespace`` creates a namespace where one must exist."""

    name: str
    client: httpx.Client
    expire: Callable[[Api], None]
    make_namespace: Callable[[Api, str], None] = lambda api, ns: None
    transcript: list[Step] = field(default_factory=list)

    def call(self, method: str, path: str, body: Any = None, *, content_type: str = "",
             accept: str = "application/json") -> tuple[int, Any]:
        """One request; its status and decoded body (text when not JSON)."""
        headers = {"Accept": accept}
        content: bytes | None = None
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
            content = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        answer = self.client.request(method, path, content=content, headers=headers)
        try:
            return answer.status_code, answer.json()
        except ValueError:
            return answer.status_code, answer.text

    def see(self, step: str, observation: Any) -> Any:
        """Record ``observation`` (normalised) as ``step`` of this server's transcript."""
        self.transcript.append((step, normal(observation)))
        return observation

    def ask(self, step: str, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        """``call`` and record its status and body as ``step``; the raw body."""
        code, answer = self.call(method, path, body, **kw)
        self.see(step, (code, answer))
        return answer

    def watch(self, path: str, during: Callable[[], None] | None = None) -> list[dict[str, Any]]:
        """The events of a watch (its query must end it: ``timeoutSeconds``), while
        ``during`` runs on another thread once the stream is open."""
        return self.watch_as(path, "application/json", during)

    def watch_as(self, path: str, accept: str, during: Callable[[], None] | None = None
                 ) -> list[dict[str, Any]]:
        """``watch`` with ``Accept: accept`` (e.g. ``TABLE``)."""
        events: list[dict[str, Any]] = []
        with self.client.stream("GET", path, timeout=_STREAM_GRACE_S + _timeout(path),
                                headers={"Accept": accept}) as answer:
            if answer.status_code != 200:
                return [{"type": f"HTTP {answer.status_code}",
                         "object": json.loads(answer.read())}]  # fmt: skip
            worker = threading.Thread(target=during) if during else None
            if worker:
                worker.start()
            for line in answer.iter_lines():
                if line.strip():
                    events.append(json.loads(line))
            if worker:
                worker.join()
        return events


def _timeout(path: str) -> float:
    found = re.search(r"timeoutSeconds=(\d+)", path)
    if found is None:
        raise DifferentialError(f"a watch in a sequence must end by itself: {path}")
    return float(found[1])


def events(raw: list[dict[str, Any]]) -> list[Any]:
    """A watch's events as (type, name, what a client reads of it); consecutive identical
    BOOKMARKs are one (the real cacher's bookmark timer ticks every second and may send the
    pre-timeout bookmark twice: ``cacher.go`` ``dispatchTimedBookmarks``)."""
    seen: list[Any] = []
    for event in raw:
        obj = event.get("object") or {}
        metadata = obj.get("metadata") or {}
        if event["type"] == "BOOKMARK":
            item: Any = ("BOOKMARK", obj.get("kind"), metadata.get("annotations"))
        elif event["type"] in ("ADDED", "MODIFIED", "DELETED"):
            item = (event["type"], metadata.get("name"), obj.get("data"), metadata.get("labels"))
        else:
            item = (event["type"], obj)
        if not (seen and item == seen[-1] and item[0] == "BOOKMARK"):
            seen.append(item)
    return seen


def normal(value: Any) -> Any:
    """``value`` with what a server generates replaced by placeholders (see the module)."""
    if isinstance(value, tuple | list):
        return [normal(v) for v in value]
    if not isinstance(value, dict):
        if isinstance(value, str):
            return _NUMBERS_IN_TOO_OLD.sub("too old resource version: N (M)", value)
        return value
    out: dict[str, Any] = {}
    for key, inner in value.items():
        if key in _PLACEHOLDERS and isinstance(inner, str) and inner:
            out[key] = _PLACEHOLDERS[key]
        elif key == "continue" and isinstance(inner, str) and inner:
            out[key] = token(inner)
        elif key == "causes" and isinstance(inner, list):  # the real server's order is a
            out[key] = sorted(normal(inner), key=repr)  # Go map's: any order
        else:
            out[key] = normal(inner)
    return out


def token(raw: str) -> dict[str, Any]:
    """A continue token decoded; its resourceVersion ``<rv>`` unless -1 (inconsistent)."""
    body = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    if body.get("rv") != -1:
        body["rv"] = "<rv>"
    return dict(body)


def names(answer: Any) -> list[str]:
    """The names of a list answer's items."""
    return [item["metadata"]["name"] for item in answer.get("items", [])]


def wait_for(what: str, done: Callable[[], bool], timeout_s: float = 30.0) -> None:
    """Poll ``done`` until true; DifferentialError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise DifferentialError(f"{what} did not happen within {timeout_s:.0f}s")
        time.sleep(0.2)


def steps(transcript: list[Step]) -> Iterator[str]:
    """The step names of a transcript, in order."""
    return (name for name, _ in transcript)
