"""Paged lists and watches of Nodes and Pods as raw JSON, for the guard's fleet-wide reads.

lightkube parses every object into its models, too slow and too big for 100,000 pods; here
the API's JSON is decoded with msgspec (lightkube's own decoder) into plain dicts, and each
page is turned into the caller's slim objects before the next is read. The HTTP client is
lightkube's ``client_adapter`` built from the ``Client``'s config: the same base URL, TLS and
credentials as every other call, not a second stack.

The protocol is the Kubernetes API's
(https://kubernetes.io/docs/reference/using-api/api-concepts/): a list in chunks of ``limit``
objects joined by the ``continue`` token (a 410 on a ``continue`` means the token expired:
start the list again); a watch from the list's ``resourceVersion``, as newline-delimited
JSON events, with ``allowWatchBookmarks`` (BOOKMARK events carry only a newer
resourceVersion) and ``timeoutSeconds``; a 410 (an HTTP status or an ERROR event) means the
resourceVersion is older than the server keeps: list again.

Every call this module makes is declared in ``RAW_CALLS``; the chart grants exactly those
(``tests/unit/test_rbac.py`` reads the declaration) and ``RawApi`` refuses any other.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

import httpx2
import msgspec
from lightkube import ConfigError
from lightkube.config import client_adapter
from lightkube.config.kubeconfig import SingleConfig

from gpuguard.clients import kube as api_errors
from gpuguard.errors import SourceError
from gpuguard.model import waits

T = TypeVar("T")
Obj = dict[str, Any]

RAW_CALLS: Final = (("Node", "list"), ("Node", "watch"), ("Pod", "list"), ("Pod", "watch"))
"""(kind, verb) of every request ``RawApi`` sends, cluster-wide."""
PAGE_SIZE = 500  # client-go's pager default (k8s.io/client-go/tools/pager)
LIST_RESTARTS = 3  # a list whose continue token expired this often in a row fails
GONE = 410
QUIET_WATCH_S = 90.0  # the API server bookmarks a watch every minute (apiserver cacher:
# defaultBookmarkFrequency); silence longer than this is a dead connection
_CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 10.0  # silence between bytes of an answer; a list of 10,000 nodes streams
_SHOWN_BODY = 200


class Expired(SourceError):
    """410 Gone: the resourceVersion (or continue token) is older than the server keeps."""


@dataclass(frozen=True, slots=True)
class Resource:
    """One kind read cluster-wide: its URL and the selector that narrows it."""

    kind: str
    plural: str
    path: str
    field_selector: str | None = None

    def params(self) -> dict[str, str]:
        return {"fieldSelector": self.field_selector} if self.field_selector else {}


NODES = Resource("Node", "Nodes", "/api/v1/nodes")
UNFINISHED_PODS = Resource(
    "Pod", "Pods", "/api/v1/pods", field_selector="status.phase!=Succeeded,status.phase!=Failed"
)


@dataclass(frozen=True, slots=True)
class Listed(Generic[T]):
    """A whole list, converted: the objects and the resourceVersion to watch from."""

    items: tuple[T, ...]
    resource_version: str
    pages: int


@dataclass(frozen=True, slots=True)
class Event:
    """One watch event: ADDED, MODIFIED, DELETED or BOOKMARK (an ERROR is raised instead)."""

    type: str
    object: Obj

    @property
    def resource_version(self) -> str:
        return str((self.object.get("metadata") or {}).get("resourceVersion") or "")


class RawApi:
    """An HTTP client to the API server of a lightkube config; close it
    (``contextlib.closing``)."""

    def __init__(
        self,
        config: SingleConfig,
        timeout_s: float = READ_TIMEOUT_S,
        transport: httpx2.BaseTransport | None = None,  # tests: an httpx2.MockTransport
    ) -> None:
        self._timeout_s = timeout_s
        self._timeout = httpx2.Timeout(timeout_s, connect=min(timeout_s, _CONNECT_TIMEOUT_S))
        params = client_adapter.ConnectionParams(timeout=self._timeout, transport=transport)
        try:
            self._http = client_adapter.Client(config, params)
        except (ConfigError, OSError, ValueError) as e:
            raise SourceError(f"Kubernetes API client for {config.cluster.server}: {e}") from e

    def close(self) -> None:
        self._http.close()

    def list_all(
        self,
        resource: Resource,
        convert: Callable[[Obj], T],
        page_size: int = PAGE_SIZE,
    ) -> Listed[T]:
        """Every object, page by page (each converted before the next is read); an expired
        continue token starts the list again, at most ``LIST_RESTARTS`` times."""
        _allowed(resource, "list")
        for _ in range(LIST_RESTARTS):
            try:
                return self._list_once(resource, convert, page_size)
            except Expired:
                continue
        raise SourceError(f"listing {resource.plural}: the continue token expired "
                          f"{LIST_RESTARTS} times in a row (410)")  # fmt: skip

    def _list_once(
        self, resource: Resource, convert: Callable[[Obj], T], page_size: int
    ) -> Listed[T]:
        items: list[T] = []
        token, pages, version = "", 0, ""
        while True:
            params = {**resource.params(), "limit": str(page_size)}
            if token:
                params["continue"] = token
            page = self._get_json(resource, params)
            pages += 1
            items += (convert(o) for o in page.get("items") or [])
            meta = page.get("metadata") or {}
            version = str(meta.get("resourceVersion") or version)
            token = str(meta.get("continue") or "")
            if not token:
                return Listed(tuple(items), version, pages)

    def _get_json(self, resource: Resource, params: Mapping[str, str]) -> Obj:
        what = f"listing {resource.plural}"
        try:
            with waits.on(f"the Kubernetes API ({what})"):
                response = self._http.get(resource.path, params=dict(params))
        except httpx2.HTTPError as e:
            raise SourceError(f"{what}: {api_errors.transport_failure(e)}") from e
        body = _decoded(what, response.status_code, response.content)
        if response.status_code != 200:
            raise _status_error(what, response.status_code, body, response.content)
        return body

    def watch(
        self,
        resource: Resource,
        resource_version: str,
        timeout_s: int,
        on_open: Callable[[], None] = lambda: None,
    ) -> Iterator[Event]:
        """Events after ``resource_version`` until the server ends the watch (about
        ``timeout_s``) or says nothing for ``QUIET_WATCH_S`` (a connection that died without
        a word; the caller resumes from its last resourceVersion, losing nothing); ``on_open``
        once the server accepted it; Expired on a 410, SourceError when it is refused or the
        stream breaks."""
        _allowed(resource, "watch")
        what = f"watching {resource.plural} from resourceVersion {resource_version}"
        params = {**resource.params(), "watch": "true", "resourceVersion": resource_version,
                  "allowWatchBookmarks": "true", "timeoutSeconds": str(timeout_s)}  # fmt: skip
        timeout = httpx2.Timeout(self._timeout_s, connect=self._timeout.connect, read=QUIET_WATCH_S)
        try:
            with self._http.stream("GET", resource.path, params=params, timeout=timeout) as r:
                if r.status_code != 200:
                    content = r.read()
                    body = _decoded(what, r.status_code, content)
                    raise _status_error(what, r.status_code, body, content)
                on_open()
                for line in r.iter_lines():
                    if line.strip():
                        yield _event(what, line)
        except httpx2.ReadTimeout:
            return  # quiet too long: maybe a dead peer; resuming costs one request
        except httpx2.HTTPError as e:
            raise SourceError(f"{what}: {type(e).__name__}: {e}") from e


class SharedApi:
    """One ``RawApi`` for a reader's lifetime: the one it was given, or one made on first use
    (building a client costs tens of milliseconds: its TLS context) and closed with the
    reader (``close``, or when the reader is collected)."""

    def __init__(self, config: Callable[[], SingleConfig], api: RawApi | None = None) -> None:
        self._config, self._api = config, api

    def get(self) -> RawApi:
        if self._api is None:
            self._api = RawApi(self._config())
            weakref.finalize(self, self._api.close)
        return self._api


def _allowed(resource: Resource, verb: str) -> None:
    if (resource.kind, verb) not in RAW_CALLS:  # the chart grants only what RAW_CALLS says
        raise ValueError(f"{verb} {resource.plural} is not in kube_lists.RAW_CALLS")


def _event(what: str, line: str) -> Event:
    try:
        raw = msgspec.json.decode(line)
    except msgspec.DecodeError as e:
        raise SourceError(f"{what}: an event that is not JSON: {line[:_SHOWN_BODY]}") from e
    kind, obj = raw.get("type"), raw.get("object")
    if not isinstance(obj, dict) or not isinstance(kind, str):
        raise SourceError(f"{what}: not a watch event: {line[:_SHOWN_BODY]}")
    if kind == "ERROR":  # obj is a Status
        code = obj.get("code")
        error = Expired if code == GONE else SourceError
        raise error(f"{what}: ERROR {code} {obj.get('reason')}: {obj.get('message')}")
    return Event(kind, obj)


def _decoded(what: str, status: int, content: bytes) -> Obj:
    try:
        body = msgspec.json.decode(content)
    except msgspec.DecodeError as e:
        shown = content[:_SHOWN_BODY].decode(errors="replace")
        raise SourceError(f"{what}: answered {status}, not JSON: {shown}") from e
    if not isinstance(body, dict):
        raise SourceError(f"{what}: answered {status}, not an object")
    return body


def _status_error(what: str, status: int, body: Obj, content: bytes) -> SourceError:
    """A ``Status`` answer as the error it means (``Expired`` for 410)."""
    message = body.get("message") or content[:_SHOWN_BODY].decode(errors="replace")
    error = Expired if status == GONE else SourceError
    return error(f"{what}: API error {status}: {message}")
