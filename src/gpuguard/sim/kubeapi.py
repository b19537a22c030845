"""A Kubernetes-API-compatible HTTP server over the simulator's ObjectStore.

It speaks enough of the real API (get, list, create, merge, strategic merge and JSON patch,
server-side apply, replace, delete and watch of Nodes, Pods, ConfigMaps, Events, Jobs and
Leases, with label/field selectors, paged lists (``sim.paging``), watch bookmarks,
resourceVersion preconditions and ``Status`` errors; and ``GET /version``) that the real
``lightkube`` clients, sync and async, and ``kubectl`` work against it unchanged over
loopback — so gpuguard's adapters are tested against the wire protocol, not against a mock of
their own making; ``tests/realcluster/test_api_differential.py`` holds it to a real
kube-apiserver. It counts what it serves (``traffic()``), for benchmarks.

Objects go out as JSON serialized once per stored version (``ObjectStore.encoded``): a list
or watch of 100,000 pods joins bytes instead of copying and encoding every object each time.

Start it with ``serve(store)``; point lightkube at it with ``lightkube_config(server.url)``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
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

import yaml

from gpuguard.sim import (
    apiaudit,
    apiresources,
    discovery,
    eviction,
    json_patch,
    kube_objects,
    managed_fields,
    paging,
    selectors,
    store,
    tables,
    traffic,
)
from gpuguard.sim.apiresources import RequestRefused, Target

if TYPE_CHECKING:
    import lightkube

log = logging.getLogger(__name__)

Query = dict[str, str]
Reply = tuple[int, store.Obj | bytes]
_WATCH_POLL_S = 0.25  # how often an idle watch checks for a stop or a vanished client
BOOKMARK_INTERVAL_S = 60.0
"""How often a watch that allows bookmarks gets one: the cacher's ``defaultBookmarkFrequency``
(kubernetes ``staging/src/k8s.io/apiserver/pkg/storage/cacher/cacher.go``: a minute)."""
_MERGE_PATCH = "application/merge-patch+json"
_STRATEGIC_PATCH = "application/strategic-merge-patch+json"
_JSON_PATCH = "application/json-patch+json"
_APPLY_PATCH = "application/apply-patch+yaml"  # server-side apply (sim.server_side_apply)
_PATCH_TYPES = (_MERGE_PATCH, _STRATEGIC_PATCH, _JSON_PATCH, _APPLY_PATCH)
_PATCH_REFUSED = "the server rejected our request due to an error in our request"
_COMPACT = (",", ":")  # the API server writes compact JSON
_INITIAL_EVENTS_END = "k8s.io/initial-events-end"
_PRE_TIMEOUT_BOOKMARK_S = 2.0
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
    def bookmark_interval(self) -> float:
        """Seconds between BOOKMARK events on a watch that allows them (60 by default, as
        the real API server; tests set it short). Applies to watches started after."""
        return self._httpd.bookmark_interval_s

    @bookmark_interval.setter
    def bookmark_interval(self, seconds: float) -> None:
        if not seconds > 0:
            raise ValueError(f"bookmark interval must be positive, not {seconds}")
        self._httpd.bookmark_interval_s = seconds

    def traffic(self) -> traffic.Snapshot:
        """Requests and response bytes served so far, per (verb, path, client); immutable."""
        return self._httpd.meter.snapshot()

    def reset_traffic(self) -> None:
        """Count from zero again (open watches go on counting)."""
        self._httpd.meter.reset()

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
        self.meter = traffic.Meter()
        self.bookmark_interval_s = BOOKMARK_INTERVAL_S
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

    def setup(self) -> None:
        super().setup()
        self.counting = _CountingWriter(self.wfile, self.server.meter)
        self.wfile = self.counting  # type: ignore[assignment]

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
        self.streaming = False  # a watch earlier on this kept-alive connection has ended
        raw_body = self._read_body()  # always drained, so the connection stays usable
        target: Target | None = None
        url = urlsplit(self.path)
        query = dict(parse_qsl(url.query))
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        client = managed_fields.manager_of({}, self.headers.get("User-Agent"))
        self.counting.count_as(
            self.server.meter.request(_audit_verb(method, url.path, query), url.path, client)
        )
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
            as_table = method == "GET" and tables.wanted(self.headers.get("Accept") or "")
            request = _Request(
                self.server.store, target, query, _body(raw_body, content_type), content_type,
                manager,
                as_table,
            )
            code, body = _verb(method, target)(request)
            if as_table and isinstance(body, dict):
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

    def _send_json(self, code: int, body: store.Obj | bytes) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body, separators=_COMPACT).encode()
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


class _CountingWriter:
    """The connection's writer, counting every byte into the current request's counter."""

    def __init__(self, raw: Any, meter: traffic.Meter) -> None:
        self._raw = raw
        self._meter = meter
        self._counter: Any = None

    def count_as(self, counter: Any) -> None:
        self._counter = counter

    def write(self, data: bytes) -> int:
        if self._counter is not None:  # counted first: a reader that has it sees it counted
            self._meter.add_bytes(self._counter, len(data))
        written: int = self._raw.write(data)
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


def _audit_verb(method: str, path: str, query: Query) -> str:
    """The API server's request verb (get, list, watch, create, update, patch, delete)."""
    if method != "GET":
        return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())
    if query.get("watch") in ("true", "1"):
        return "watch"
    parts = [p for p in path.split("/") if p]
    core = parts[:1] == ["api"]
    # /api/v1/<plural>, /api/v1/namespaces/<ns>/<plural>, /apis/<g>/<v>/... (a collection:
    # an odd number of parts after the group/version, counting a namespace as two)
    rest = parts[2:] if core else parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    return "list" if len(rest) == 1 else "get"


@dataclass(frozen=True)
class _Request:
    """What a verb needs of one (non-watch) request."""

    store: store.ObjectStore
    target: Target
    query: Query
    body: Any  # parsed JSON, None when there was none
    content_type: str
    manager: str  # the field manager recorded in managedFields (sim.managed_fields)
    as_table: bool = False  # the client asked for a Table (answer a dict, not bytes)

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
    """A list, paged with ``limit``/``continue`` (``sim.paging``)."""
    kind = r.target.resource
    labels, fields = _selectors(r.target, r.query)
    across = kind.namespaced and r.target.namespace is None
    start, snapshot = _list_snapshot(r, across)
    selective = bool(labels.requirements or fields.requirements)
    page = paging.page(
        snapshot, start, _limit(r.query),
        (lambda o: _matches(o, labels, fields)) if selective else None, across_namespaces=across,
    )
    metadata: store.Obj = {"resourceVersion": str(snapshot.resource_version)}
    if page.continue_token:
        metadata["continue"] = page.continue_token
    if page.remaining is not None:
        metadata["remainingItemCount"] = page.remaining
    head = {"kind": f"{kind.kind}List", "apiVersion": kind.api_version, "metadata": metadata}
    if r.as_table:
        return 200, {**head, "items": [kind.decorate(o) for o in page.objects]}
    items = b",".join(_listed(r.store, kind, o) for o in page.objects)
    opening = json.dumps(head, separators=_COMPACT).encode()[:-1]
    return 200, opening + b',"items":[' + items + b"]}"


def _list_snapshot(r: _Request, across: bool) -> tuple[paging.Key | None, store.Snapshot]:
    """Where the page starts and the snapshot it is read from: the continue token's, an exact
    resourceVersion asked for, or now (kubernetes apiserver ``storage.ValidateListOptions``
    and the cacher's ``waitAndListExactRV``)."""
    kind, namespace = r.target.resource.kind, r.target.namespace
    token, version = r.query.get("continue"), r.query.get("resourceVersion") or ""
    if not token:
        exact = r.query.get("resourceVersionMatch") == "Exact" or (
            _limit(r.query) is not None and r.query.get("resourceVersionMatch") is None
        )
        at = _resource_version(version) if exact else None
        try:
            return None, r.store.snapshot(kind, namespace, at)
        except store.StoreGone as e:
            message = "The resourceVersion for the provided list is too old."
            raise RequestRefused(410, "Expired", message) from e
    if version not in ("", "0"):
        message = "specifying resource version is not allowed when using continue"
        raise RequestRefused(400, "BadRequest", message)
    try:
        resume = paging.decode(token, namespace, across)
    except paging.TokenInvalid as e:
        raise RequestRefused(400, "BadRequest", f"invalid continue token: {e}") from e
    at = None if resume.resource_version == paging.INCONSISTENT else resume.resource_version
    try:
        return resume.start, r.store.snapshot(kind, namespace, at)
    except store.StoreGone as e:
        remainder = paging.encode(resume.start, paging.INCONSISTENT, across, rooted=False)
        raise apiresources.ListExpired(paging.EXPIRED_MESSAGE, remainder) from e


def _limit(query: Query) -> int | None:
    raw = query.get("limit")
    if not raw:
        return None
    try:
        limit = int(raw)
    except ValueError as e:  # the server's words: Go's strconv error
        message = f'strconv.ParseInt: parsing "{raw}": invalid syntax'
        raise RequestRefused(400, "BadRequest", message) from e
    return limit if limit > 0 else None  # 0 and negative: no limit, as the API server reads it


def _encoded(object_store: store.ObjectStore, kind: apiresources.ResourceType,
             obj: store.Obj) -> bytes:
    """The object as served (kind and apiVersion set), serialized once per stored version."""
    return object_store.encoded(kind.kind, obj, kind.api_version, lambda o: json.dumps(
        kind.decorate(o), separators=_COMPACT).encode())


def _listed(object_store: store.ObjectStore, kind: apiresources.ResourceType,
            obj: store.Obj) -> bytes:
    """A list's item: without kind and apiVersion, which the list carries (the API server
    encodes a list's items bare); serialized once per stored version."""
    return object_store.encoded(kind.kind, obj, "item", lambda o: json.dumps(
        {k: v for k, v in o.items() if k not in ("kind", "apiVersion")},
        separators=_COMPACT).encode())


def _get(r: _Request) -> Reply:
    return 200, r.target.resource.decorate(r.store.get(*r.key))


def _create(r: _Request) -> Reply:
    obj = _checked_body(r)
    namespace = r.target.namespace or ""
    given = obj.get("metadata", {}).get("namespace")
    if r.target.resource.namespaced and given not in (None, namespace):
        message = ("the namespace of the provided object does not match the namespace sent on"
                   " the request")
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
        message = (f"the name of the object ({given}) does not match the name on the URL"
                   f" ({r.target.name})")
        raise RequestRefused(400, "BadRequest", message)
    updated = r.store.replace(*r.key, obj, scope=_scope(r.target), manager=r.manager)
    return 200, r.target.resource.decorate(updated)


def _patch(r: _Request) -> Reply:
    """A JSON merge patch (RFC 7386: lists replaced), a strategic merge patch (lists with a
    merge key merged by it, ``sim.strategic_merge``) or a JSON patch (RFC 6902,
    ``sim.json_patch``); another type is a 415 with the server's bare message."""
    if r.content_type not in _PATCH_TYPES:
        raise RequestRefused(415, "UnsupportedMediaType", "415: Unsupported Media Type", {})
    if r.content_type == _JSON_PATCH:
        return 200, r.target.resource.decorate(_json_patched(r))
    if r.content_type == _APPLY_PATCH:
        return _applied(r)
    updated = r.store.merge_patch(*r.key, _checked_body(r), scope=_scope(r.target),
                                  manager=r.manager, strategic=r.content_type == _STRATEGIC_PATCH)
    return 200, r.target.resource.decorate(updated)


def _applied(r: _Request) -> Reply:
    """A server-side apply (``sim.server_side_apply``): 201 when it created the object."""
    if r.target.subresource is not None:
        raise RequestRefused(415, "UnsupportedMediaType", "415: Unsupported Media Type", {})
    try:
        config = yaml.safe_load(r.body)
    except yaml.YAMLError as e:
        raise RequestRefused(400, "BadRequest", f"error decoding YAML: {e}") from e
    config = _checked_body(dataclasses.replace(r, body=config))
    given = config.get("metadata", {}).get("name")
    if given not in (None, r.target.name):
        message = (f"the name of the object ({given}) does not match the name on the URL"
                   f" ({r.target.name})")
        raise RequestRefused(400, "BadRequest", message)
    obj, created = r.store.apply(*r.key, config, manager=r.manager,
                                 force=r.query.get("force") == "true")
    return (201 if created else 200), r.target.resource.decorate(obj)


def _json_patched(r: _Request) -> store.Obj:
    def change(current: store.Obj) -> store.Obj:
        try:
            return json_patch.apply(current, r.body)
        except json_patch.PatchFailed as e:  # the server's words say nothing of which
            raise RequestRefused(422, "Invalid", _PATCH_REFUSED, {}) from e

    return r.store.patch_with(*r.key, change, scope=_scope(r.target), manager=r.manager)


def _delete(r: _Request) -> Reply:
    """The deleted object, or a ``Success`` Status for the kinds that answer one."""
    deleted = r.store.delete(*r.key)
    if not r.target.resource.returns_deleted:
        return 200, apiresources.deleted_status(r.target, deleted["metadata"].get("uid", ""))
    return 200, r.target.resource.decorate(deleted)


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


def _body(raw: bytes, content_type: str) -> Any:
    """The request's body: JSON, or the text of a server-side apply (YAML: ``_applied``)."""
    return raw.decode(errors="replace") if content_type == _APPLY_PATCH else _json(raw)


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
        message = apiresources.unsupported_field(target.resource, sorted(unsupported)[0])
        raise RequestRefused(400, "BadRequest", message)
    return labels, fields


def _matches(
    obj: store.Obj, labels: selectors.LabelSelector, fields: selectors.FieldSelector
) -> bool:
    return labels.matches(obj.get("metadata", {}).get("labels")) and fields.matches(obj)


def watch_event(
    change: store.Change, labels: selectors.LabelSelector, fields: selectors.FieldSelector
) -> tuple[str, store.Obj] | None:
    """The event a watch with these selectors is sent for ``change`` of its kind (None: none):
    a MODIFIED that leaves (enters) the selection is a DELETED (ADDED), as the real API's
    watch cache reports it; the DELETED carries the object as it was, the last state the
    watcher selected, at the change's resourceVersion (kubernetes apiserver
    ``cacher/cache_watcher.go`` ``convertToWatchEvent``)."""
    now = _matches(change.object, labels, fields)
    before = change.previous is not None and _matches(change.previous, labels, fields)
    if change.type is not store.ChangeType.MODIFIED:
        return (change.type.value, change.object) if now else None
    if now:
        return ("MODIFIED" if before else "ADDED", change.object)
    if not before or change.previous is None:
        return None
    metadata = {**change.previous["metadata"], "resourceVersion": str(change.resource_version)}
    return ("DELETED", {**change.previous, "metadata": metadata})


class _Watch:
    """One ``?watch=true`` request: newline-delimited JSON events in a chunked response.

    With ``allowWatchBookmarks=true`` it also sends a BOOKMARK every ``bookmark_interval``:
    an object with only kind, apiVersion and ``metadata.resourceVersion``, the version the
    watcher has seen every change through — its client can resume from it instead of an
    older version the history may have lost (https://kubernetes.io/docs/reference/using-api/
    api-concepts/#watch-bookmarks). ``sendInitialEvents=true`` first streams the current
    objects as ADDED, then a BOOKMARK annotated ``k8s.io/initial-events-end: "true"``
    (https://kubernetes.io/docs/reference/using-api/api-concepts/#streaming-lists); so does
    any watch that starts from the current state (no resourceVersion, or 0) and allows
    bookmarks, as the watch cache answers it. A timed BOOKMARK is sent only once the watch
    is past the resourceVersion it started from (``cache_watcher.go``: events, bookmarks
    included, newer than that), so an idle watch gets none.
    """

    def __init__(self, handler: _Handler, target: Target, query: Query) -> None:
        self._handler = handler
        self._target = target
        self._store = handler.server.store
        self._labels, self._fields = _selectors(target, query)
        self._initial_events = query.get("sendInitialEvents") == "true"
        if self._initial_events:
            _check_streaming(query)
        self._since = None if self._initial_events else _resource_version(
            query.get("resourceVersion"))
        timeout_s = float(query.get("timeoutSeconds") or 0)
        self._deadline = time.monotonic() + timeout_s if timeout_s > 0 else None
        self._bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        self._interval = handler.server.bookmark_interval_s
        self._next_bookmark = self._next_bookmark_time()
        self._tables = tables.wanted(handler.headers.get("Accept") or "")
        self._columns_sent = False

    def run(self) -> None:
        """Stream events until the client leaves, the timeout passes or the server stops; then
        end the response with the terminating chunk, as the API server ends a watch it closes
        (a client sees a clean end of stream, not a broken connection)."""
        self._handler.start_stream()
        last = self._send_current_state() if self._since is None else self._since
        started = last
        if self._since is None and self._bookmarks:
            self._send_bookmark(last, {_INITIAL_EVENTS_END: "true"})
        while self._should_continue():
            try:
                changes, through = self._store.changes_after(last, self._poll_timeout())
            except store.StoreGone as e:
                self._send_status(apiresources.status_body(e))
                break
            for change in changes:
                event = self._event_for(change)
                if event is not None:
                    self._send(*event)
            last = through
            if time.monotonic() >= self._next_bookmark:
                self._timed_bookmark(last, started)
        self._handler.send_chunk(b"")
        if self._handler.server.stopping.is_set():
            self._handler.close_connection = True

    def _send_current_state(self) -> int:
        """No resourceVersion given: every matching object as ADDED, then changes after."""
        snapshot = self._store.snapshot(self._target.resource.kind, self._target.namespace)
        for obj in snapshot.objects:
            if _matches(obj, self._labels, self._fields):
                self._send("ADDED", obj)
        return snapshot.resource_version

    def _event_for(self, change: store.Change) -> tuple[str, store.Obj] | None:
        """The event this watcher sees (``watch_event``), for its kind and namespace only."""
        ns = self._target.namespace
        if change.kind != self._target.resource.kind or ns not in (None, change.namespace):
            return None
        return watch_event(change, self._labels, self._fields)

    def _send(self, event_type: str, obj: store.Obj) -> None:
        if self._tables:
            line = json.dumps({"type": event_type, "object": self._as_table(obj)},
                              separators=_COMPACT).encode()
        else:
            encoded = _encoded(self._store, self._target.resource, obj)
            line = b'{"type":"' + event_type.encode() + b'","object":' + encoded + b"}"
        self._handler.send_chunk(line + b"\n")

    def _send_status(self, status: store.Obj) -> None:
        event = {"type": "ERROR", "object": status}
        self._handler.send_chunk(json.dumps(event, separators=_COMPACT).encode() + b"\n")

    def _send_bookmark(self, resource_version: int, annotations: dict[str, str] | None = None
                       ) -> None:
        """A BOOKMARK: kind, apiVersion and the resourceVersion seen through (kubernetes
        apiserver ``cacher.go`` ``dispatchEvent`` of a bookmark event)."""
        metadata: store.Obj = {"resourceVersion": str(resource_version)}
        if annotations:
            metadata["annotations"] = annotations
        resource = self._target.resource
        obj = {"kind": resource.kind, "apiVersion": resource.api_version, "metadata": metadata}
        event = {"type": "BOOKMARK", "object": obj}
        self._handler.send_chunk(json.dumps(event, separators=_COMPACT).encode() + b"\n")
        self._next_bookmark = self._next_bookmark_time()

    def _timed_bookmark(self, resource_version: int, started: int) -> None:
        """The periodic (or pre-timeout) BOOKMARK, if the watch moved past where it began."""
        if resource_version > started:
            self._send_bookmark(resource_version)
        else:
            self._next_bookmark = self._next_bookmark_time()

    def _next_bookmark_time(self) -> float:
        """Every interval, and once 2 s before the watch's timeout so its client can resume
        from there; none after that (kubernetes apiserver ``cacher/cache_watcher.go``
        ``nextBookmarkTime``)."""
        if not self._bookmarks:
            return math.inf
        now = time.monotonic()
        when = now + self._interval
        if self._deadline is not None:
            when = min(when, self._deadline - _PRE_TIMEOUT_BOOKMARK_S)
        return when if when >= now else math.inf

    def _as_table(self, obj: store.Obj) -> store.Obj:
        """A one-row Table (``Accept: ...;as=Table``, what ``kubectl get -w`` sends); as the
        API server does, only the first event carries the column definitions, the later ones
        null (kubernetes apiserver ``endpoints/handlers/watch.go``: headers on the first
        object only)."""
        table = tables.table(self._target.resource, self._target.resource.decorate(obj))
        if self._columns_sent:  # null, not left out: as the API server writes it
            table["columnDefinitions"] = None
        self._columns_sent = True
        return table

    def _should_continue(self) -> bool:
        if self._handler.server.stopping.is_set() or self._handler.client_gone():
            return False
        return self._deadline is None or time.monotonic() < self._deadline

    def _poll_timeout(self) -> float:
        until = min(self._deadline or math.inf, self._next_bookmark) - time.monotonic()
        return max(0.0, min(_WATCH_POLL_S, until))


def _check_streaming(query: Query) -> None:
    """``sendInitialEvents`` asks for ``resourceVersionMatch=NotOlderThan`` and bookmarks
    (apimachinery ``ValidateListOptions``); 422 with the server's words otherwise."""
    for field, wrong, why in (
        ("resourceVersionMatch", query.get("resourceVersionMatch") != "NotOlderThan",
         "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"),
        ("allowWatchBookmarks", query.get("allowWatchBookmarks") not in ("true", "1"),
         "sendInitialEvents requires setting allowWatchBookmarks to true"),
    ):
        if wrong:
            cause = {"reason": "FieldValueForbidden", "message": f"Forbidden: {why}",
                     "field": field}
            details = {"group": "meta.k8s.io", "kind": "ListOptions", "causes": [cause]}
            message = f'ListOptions.meta.k8s.io "" is invalid: {field}: Forbidden: {why}'
            raise RequestRefused(422, "Invalid", message, details)


def _resource_version(raw: str | None) -> int | None:
    """The watch's starting point: None (also for "" and "0") = current state first."""
    if not raw or raw == "0":
        return None
    try:
        return int(raw)
    except ValueError as e:
        raise RequestRefused(400, "BadRequest", f"resourceVersion {raw!r} is not valid") from e
