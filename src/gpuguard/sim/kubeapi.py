"""A Kubernetes-API-compatible HTTP server over the simulator's ObjectStore.

It speaks enough of the real API (get, list, create, merge-patch, replace, delete and watch
of Nodes, Pods, ConfigMaps, Events, Jobs and Leases, with label/field selectors,
resourceVersion preconditions and ``Status`` errors; and ``GET /version``) that the real
``lightkube`` clients, sync and async, work against it unchanged over loopback — so
gpuguard's adapters are tested against the wire protocol, not against a mock of their own
making.

Start it with ``serve(store)``; point lightkube at it with ``lightkube_config(server.url)``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from gpuguard.sim import (
    apiaudit,
    apiresources,
    discovery,
    eviction,
    kube_objects,
    managed_fields,
    selectors,
    store,
    tables,
)
from gpuguard.sim.apiresources import RequestRefused, Target

if TYPE_CHECKING:
    import lightkube

log = logging.getLogger(__name__)

Query = dict[str, str]
Reply = tuple[int, store.Obj]
_WATCH_POLL_S = 0.25  # how often an idle watch checks for a stop or a vanished client
_MERGE_PATCH_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")
_JOIN_TIMEOUT_S = 5.0
_SERVER_FIELDS = ("uid", "creationTimestamp", "resourceVersion", "generation")  # ignored on create
_VERSION_PATHS = ("/version", "/version/")
_GIT_VERSION = re.compile(r"^v(\d+)\.(\d+)\.\d+")


class KubeApiServer:
    """The HTTP server on a background thread; ``stop()`` ends every connection and watch."""

    def __init__(
        self,
        object_store: store.ObjectStore,
        host: str = "127.0.0.1",
        port: int = 0,
        version: str = kube_objects.CONTROL_PLANE_VERSION,
    ):
        self.store = object_store
        self._httpd = _HttpServer((host, port), object_store)
        self._thread: threading.Thread | None = None
        self.version = version

    @property
    def version(self) -> str:
        """The ``gitVersion`` that ``GET /version`` answers (an upgrade can change it live)."""
        return str(self._httpd.version_info["gitVersion"])

    @version.setter
    def version(self, git_version: str) -> None:
        self._httpd.version_info = version_info(git_version)

    @property
    def withheld(self) -> frozenset[str]:
        """Resources (``group/version/plural``) this server does not serve: a 404 and absent
        from discovery, as on a cluster without them (e.g. ``resource.k8s.io/v1/
        devicetaintrules`` on Kubernetes 1.36, which serves only ``v1beta2``)."""
        return self._httpd.withheld

    @withheld.setter
    def withheld(self, resources: frozenset[str]) -> None:
        self._httpd.withheld = resources

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def requests(self) -> list[apiaudit.RecordedRequest]:
        """Every request served so far, oldest first (watches included)."""
        return self._httpd.audit.requests

    def fail_next(
        self,
        method: str,
        path: str,
        status: int = 500,
        reason: str = "InternalError",
        times: int = 1,
    ) -> None:
        """Answer the next ``times`` ``method`` requests on ``path`` (exact, no query) with a
        ``Status`` of ``status``/``reason`` instead of serving them."""
        self._httpd.audit.inject(apiaudit.InjectedFailure(method, path, status, reason, times))

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="sim-kubeapi",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        self._httpd.stopping.set()
        self.store.wake_watchers()
        self._httpd.wait_for_watches(_JOIN_TIMEOUT_S)  # each ends with its terminating chunk
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
        self._httpd.close_connections()
        self._httpd.server_close()


@contextlib.contextmanager
def serve(
    object_store: store.ObjectStore,
    host: str = "127.0.0.1",
    port: int = 0,
    version: str = kube_objects.CONTROL_PLANE_VERSION,
) -> Iterator[KubeApiServer]:
    """Serve ``object_store`` on ``host:port`` (0 = any free port) until the block ends;
    ``GET /version`` answers ``version`` (an RKE2 ``gitVersion`` such as ``v1.34.3+rke2r1``)."""
    server = KubeApiServer(object_store, host, port, version)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def version_info(git_version: str) -> store.Obj:
    """The body a real API server answers on ``GET /version`` for ``git_version``."""
    match = _GIT_VERSION.match(git_version)
    if match is None:
        raise ValueError(f"API server version {git_version!r} is not like v1.34.3+rke2r1")
    return {
        "major": match[1],
        "minor": match[2],
        "gitVersion": git_version,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24.4 X:boringcrypto",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def lightkube_config(url: str, namespace: str = "default") -> lightkube.KubeConfig:
    """A lightkube configuration for the simulator at ``url`` (plain HTTP, no credentials)."""
    from lightkube import KubeConfig
    from lightkube.config.models import Cluster, User

    return KubeConfig.from_one(cluster=Cluster(server=url), user=User(), namespace=namespace)


class _HttpServer(ThreadingHTTPServer):
    """A thread per connection; remembers open connections so ``stop`` can close them."""

    daemon_threads = True
    request_queue_size = 64  # many clients (controller, agents, tests) connect at once

    def __init__(self, address: tuple[str, int], object_store: store.ObjectStore) -> None:
        self.store = object_store
        self.stopping = threading.Event()
        self.audit = apiaudit.Audit()
        self.version_info: store.Obj = {}
        self.withheld: frozenset[str] = frozenset()
        self._lock = threading.Lock()
        self._connections: dict[socket.socket, threading.Thread] = {}
        self._watches = 0
        self._watches_changed = threading.Condition(self._lock)
        super().__init__(address, _Handler)

    @contextlib.contextmanager
    def watch_open(self) -> Iterator[None]:
        """Count a watch while it streams, so ``stop`` can let it end cleanly first."""
        with self._watches_changed:
            self._watches += 1
        try:
            yield
        finally:
            with self._watches_changed:
                self._watches -= 1
                self._watches_changed.notify_all()

    def wait_for_watches(self, timeout: float) -> None:
        """Wait until every open watch has ended (they end on ``stopping``)."""
        with self._watches_changed:
            self._watches_changed.wait_for(lambda: self._watches == 0, timeout)

    def process_request(self, request: Any, client_address: Any) -> None:
        request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        thread = threading.Thread(
            target=self.process_request_thread,
            args=(request, client_address),
            name="sim-kubeapi-connection",
            daemon=True,
        )
        with self._lock:
            self._connections[request] = thread
        thread.start()

    def shutdown_request(self, request: Any) -> None:
        with self._lock:
            self._connections.pop(request, None)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self._lock:
            open_connections = list(self._connections.items())
        for sock, _ in open_connections:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for _, thread in open_connections:
            thread.join(_JOIN_TIMEOUT_S)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("connection from %s ended with an error", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    """One HTTP/1.1 connection: routes each request to a verb and writes JSON back."""

    protocol_version = "HTTP/1.1"
    server: _HttpServer
    streaming = False  # the response headers are out: errors can only end the stream

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        raw_body = self._read_body()  # always drained, so the connection stays usable
        target: Target | None = None
        url = urlsplit(self.path)
        query = dict(parse_qsl(url.query))
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        try:
            self._audit(method, url.path, query, content_type, raw_body)
            if method == "GET" and url.path in _VERSION_PATHS:
                self._send_json(200, self.server.version_info)
                return
            document = discovery.answer(
                url.path, self.headers.get("Host") or "", self.server.withheld,
            ) if method == "GET" else None
            if document is not None:
                self._send_json(200, document)
                return
            target = apiresources.parse_path(url.path, self.server.withheld)
            if method == "GET" and target.name is None and query.get("watch") in ("true", "1"):
                with self.server.watch_open():
                    _Watch(self, target, query).run()
                return
            manager = managed_fields.manager_of(query, self.headers.get("User-Agent"))
            request = _Request(
                self.server.store, target, query, _json(raw_body), content_type, manager
            )
            code, body = _verb(method, target)(request)
            if method == "GET" and tables.wanted(self.headers.get("Accept") or ""):
                body = tables.table(target.resource, body)
            self._send_json(code, body)
        except store.StoreError as e:
            self._send_error(e, target)
        except ConnectionError:
            self.close_connection = True
        except Exception as e:  # a simulator bug: answer as the real API would, and say so
            log.exception("sim kubeapi failed on %s %s", method, self.path)
            self._send_error(RequestRefused(500, "InternalError", f"{type(e).__name__}: {e}"))

    def _audit(self, method: str, path: str, query: Query, content_type: str, raw: bytes) -> None:
        """Record the request; raise the failure a test injected for it, if any."""
        body = _json_or_none(raw)
        audit = self.server.audit
        audit.record(apiaudit.RecordedRequest(method, path, query, content_type, body))
        failure = audit.take_failure(method, path)
        if failure is not None:
            message = f"injected failure for {method} {path}"
            raise RequestRefused(failure.status, failure.reason, message)

    def _read_body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _send_error(self, error: store.StoreError, target: Target | None = None) -> None:
        if self.streaming:  # too late for a status code: end the stream instead
            self.close_connection = True
        else:
            self._send_json(error.status, apiresources.status_body(error, target))

    def _send_json(self, code: int, body: store.Obj) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def start_stream(self) -> None:
        self.streaming = True
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def send_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    def client_gone(self) -> bool:
        """True when the peer closed its end (a reader that stopped watching)."""
        readable, _, _ = select.select([self.connection], [], [], 0)
        if not readable:
            return False
        try:
            peeked: bytes = self.connection.recv(1, socket.MSG_PEEK)
        except OSError:
            return True
        return peeked == b""


@dataclass(frozen=True)
class _Request:
    """What a verb needs of one (non-watch) request."""

    store: store.ObjectStore
    target: Target
    query: Query
    body: Any  # parsed JSON, None when there was none
    content_type: str
    manager: str  # the field manager recorded in managedFields (sim.managed_fields)

    @property
    def key(self) -> tuple[str, str, str]:
        return self.target.resource.kind, self.target.namespace or "", self.target.name or ""


Verb = Callable[[_Request], Reply]


def _verb(method: str, target: Target) -> Verb:
    on_object = target.name is not None
    verb = _VERBS.get((method, on_object, target.subresource is not None))
    if target.subresource in target.resource.create_subresources and method != "POST":
        verb = None
    if verb is None or (not on_object and target.namespace is None and method != "GET"):
        raise RequestRefused(405, "MethodNotAllowed", f"{method} is not supported on this path")
    return verb


def _list(r: _Request) -> Reply:
    kind = r.target.resource
    labels, fields = _selectors(r.target, r.query)
    items, rv = r.store.list_with_version(kind.kind, r.target.namespace)
    return 200, {
        "kind": f"{kind.kind}List",
        "apiVersion": kind.api_version,
        "metadata": {"resourceVersion": str(rv)},
        "items": [kind.decorate(o) for o in items if _matches(o, labels, fields)],
    }


def _get(r: _Request) -> Reply:
    return 200, r.target.resource.decorate(r.store.get(*r.key))


def _create(r: _Request) -> Reply:
    obj = _checked_body(r)
    namespace = r.target.namespace or ""
    given = obj.get("metadata", {}).get("namespace")
    if r.target.resource.namespaced and given not in (None, namespace):
        message = f"the namespace of the object ({given}) does not match the request ({namespace})"
        raise RequestRefused(400, "BadRequest", message)
    metadata = {k: v for k, v in obj.get("metadata", {}).items() if k not in _SERVER_FIELDS}
    created = r.store.create(
        r.target.resource.kind, namespace, {**obj, "metadata": metadata}, manager=r.manager
    )
    return 201, r.target.resource.decorate(created)


def _replace(r: _Request) -> Reply:
    obj = _checked_body(r)
    given = obj.get("metadata", {}).get("name")
    if given != r.target.name:
        message = f"the name of the object ({given}) does not match the URL ({r.target.name})"
        raise RequestRefused(400, "BadRequest", message)
    updated = r.store.replace(*r.key, obj, scope=_scope(r.target), manager=r.manager)
    return 200, r.target.resource.decorate(updated)


def _patch(r: _Request) -> Reply:
    if r.content_type not in _MERGE_PATCH_TYPES:
        message = (
            f"the body of the request was in an unknown format ({r.content_type});"
            f" accepted: {', '.join(_MERGE_PATCH_TYPES)}"
        )
        raise RequestRefused(415, "UnsupportedMediaType", message)
    updated = r.store.merge_patch(
        *r.key, _checked_body(r), scope=_scope(r.target), manager=r.manager
    )
    return 200, r.target.resource.decorate(updated)


def _delete(r: _Request) -> Reply:
    return 200, r.target.resource.decorate(r.store.delete(*r.key))


def _create_subresource(r: _Request) -> Reply:
    if r.target.subresource != "eviction":
        raise RequestRefused(405, "MethodNotAllowed", "POST is not supported on this path")
    if not isinstance(r.body, dict) or r.body.get("kind") not in (None, "Eviction"):
        raise RequestRefused(400, "BadRequest", "the request body must be an Eviction")
    return 201, eviction.evict(r.store, r.target.namespace or "", r.target.name or "")


# (HTTP method, names one object, names a subresource) → verb
_VERBS: dict[tuple[str, bool, bool], Verb] = {
    ("GET", False, False): _list,
    ("POST", False, False): _create,
    ("GET", True, False): _get,
    ("PUT", True, False): _replace,
    ("PATCH", True, False): _patch,
    ("DELETE", True, False): _delete,
    ("GET", True, True): _get,
    ("PUT", True, True): _replace,
    ("PATCH", True, True): _patch,
    ("POST", True, True): _create_subresource,
}


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError as e:
        raise RequestRefused(400, "BadRequest", f"request body is not JSON: {e}") from e


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


def _scope(target: Target) -> store.Scope:
    return store.Scope.STATUS if target.subresource == "status" else store.Scope.MAIN


def _checked_body(r: _Request) -> store.Obj:
    if not isinstance(r.body, dict):
        raise RequestRefused(400, "BadRequest", "the request body must be a JSON object")
    kind, expected = r.body.get("kind"), r.target.resource.kind
    if kind not in (None, expected):
        raise RequestRefused(400, "BadRequest", f"body kind {kind} does not match {expected}")
    return r.body


def _selectors(
    target: Target, query: Query
) -> tuple[selectors.LabelSelector, selectors.FieldSelector]:
    try:
        labels = selectors.parse_label_selector(query.get("labelSelector"))
        fields = selectors.parse_field_selector(query.get("fieldSelector"))
    except selectors.SelectorError as e:
        raise RequestRefused(400, "BadRequest", str(e)) from e
    unsupported = fields.keys - target.resource.field_labels
    if unsupported:
        raise RequestRefused(
            400,
            "BadRequest",
            f"field label not supported for {target.resource.kind}: {sorted(unsupported)}",
        )
    return labels, fields


def _matches(
    obj: store.Obj, labels: selectors.LabelSelector, fields: selectors.FieldSelector
) -> bool:
    return labels.matches(obj.get("metadata", {}).get("labels")) and fields.matches(obj)


class _Watch:
    """One ``?watch=true`` request: newline-delimited JSON events in a chunked response."""

    def __init__(self, handler: _Handler, target: Target, query: Query) -> None:
        self._handler = handler
        self._target = target
        self._store = handler.server.store
        self._labels, self._fields = _selectors(target, query)
        self._since = _resource_version(query.get("resourceVersion"))
        timeout_s = float(query.get("timeoutSeconds") or 0)
        self._deadline = time.monotonic() + timeout_s if timeout_s > 0 else None
        self._tables = tables.wanted(handler.headers.get("Accept") or "")
        self._columns_sent = False

    def run(self) -> None:
        """Stream events until the client leaves, the timeout passes or the server stops; then
        end the response with the terminating chunk, as the API server ends a watch it closes
        (a client sees a clean end of stream, not a broken connection)."""
        self._handler.start_stream()
        last = self._send_current_state() if self._since is None else self._since
        while self._should_continue():
            try:
                changes = self._store.changes_since(last, timeout=self._poll_timeout())
            except store.StoreGone as e:
                self._send("ERROR", apiresources.status_body(e))
                break
            for change in changes:
                last = change.resource_version
                event = self._event_for(change)
                if event is not None:
                    self._send(*event)
        self._handler.send_chunk(b"")
        if self._handler.server.stopping.is_set():
            self._handler.close_connection = True

    def _send_current_state(self) -> int:
        """No resourceVersion given: every matching object as ADDED, then changes after."""
        kind, namespace = self._target.resource.kind, self._target.namespace
        items, rv = self._store.list_with_version(kind, namespace)
        for obj in items:
            if _matches(obj, self._labels, self._fields):
                self._send("ADDED", obj)
        return rv

    def _event_for(self, change: store.Change) -> tuple[str, store.Obj] | None:
        """The event this watcher sees: a MODIFIED that leaves (enters) the selection is a
        DELETED (ADDED), as the real API's watch cache reports it."""
        ns = self._target.namespace
        if change.kind != self._target.resource.kind or ns not in (None, change.namespace):
            return None
        now = _matches(change.object, self._labels, self._fields)
        before = change.previous is not None and _matches(
            change.previous, self._labels, self._fields
        )
        if change.type is not store.ChangeType.MODIFIED:
            return (change.type.value, change.object) if now else None
        if now:
            return ("MODIFIED" if before else "ADDED", change.object)
        return ("DELETED", change.object) if before else None

    def _send(self, event_type: str, obj: store.Obj) -> None:
        if obj.get("kind") != "Status":
            obj = self._as_asked(self._target.resource.decorate(obj))
        line = json.dumps({"type": event_type, "object": obj}) + "\n"
        self._handler.send_chunk(line.encode())

    def _as_asked(self, obj: store.Obj) -> store.Obj:
        """The object, or (``Accept: ...;as=Table``, what ``kubectl get -w`` sends) a one-row
        Table; as the API server does, only the first event carries the column definitions
        (kubernetes apiserver ``endpoints/handlers/watch.go``: headers on the first object only)."""
        if not self._tables:
            return obj
        table = tables.table(self._target.resource, obj)
        if self._columns_sent:
            del table["columnDefinitions"]
        self._columns_sent = True
        return table

    def _should_continue(self) -> bool:
        if self._handler.server.stopping.is_set() or self._handler.client_gone():
            return False
        return self._deadline is None or time.monotonic() < self._deadline

    def _poll_timeout(self) -> float:
        if self._deadline is None:
            return _WATCH_POLL_S
        return max(0.0, min(_WATCH_POLL_S, self._deadline - time.monotonic()))


def _resource_version(raw: str | None) -> int | None:
    """The watch's starting point: None (also for "" and "0") = current state first."""
    if not raw or raw == "0":
        return None
    try:
        return int(raw)
    except ValueError as e:
        raise RequestRefused(400, "BadRequest", f"resourceVersion {raw!r} is not valid") from e
