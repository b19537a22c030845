"""The simulator's metric endpoints over HTTP, and the Prometheus scrape config that reads them.

One loopback server stands in for a dcgm-exporter per node (``/dcgm/<node>/metrics``, with the
fleet-health series of ``sim.fleet_exporters``), a node-exporter per node for its InfiniBand
counters (``/node/<node>/metrics``) and one kube-state-metrics (``/ksm/metrics``), so a real
Prometheus can scrape each node as its own target. Each request renders the world as it is at
that moment (``sim.exporters``); a node whose exporter is down answers 503, which Prometheus
records as ``up == 0``.
``scrape_config`` writes the matching ``scrape_configs`` so tests and demos never hand-write
them, and ``target_labels`` says which ``job``/``instance`` each target's series carry — the
same labels ``sim.history`` stamps on backfilled samples.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http import server as httpserver
from typing import Any, Protocol
from urllib.parse import urlsplit

from gpuguard.model import ports
from gpuguard.sim import exporters, exposition, fleet_exporters, state, store

DCGM_JOB = "dcgm-exporter"
KSM_JOB = "kube-state-metrics"
NODE_JOB = "node-exporter"
DCGM_PORT = 9400  # dcgm-exporter's default listen port, used in the instance label
NODE_PORT = 9100  # node-exporter's default listen port, used in the instance label
KSM_INSTANCE = "kube-state-metrics:8080"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class MetricsWorld(Protocol):
    """What the endpoints render: the world's nodes, its object store and its clock."""

    @property
    def nodes(self) -> Sequence[state.SimNode]: ...

    @property
    def store(self) -> store.ObjectStore: ...

    @property
    def clock(self) -> ports.Clock: ...


@dataclass(frozen=True)
class MetricsServer:
    """A running server: its base URL (``http://127.0.0.1:PORT``) and per-endpoint URLs."""

    url: str

    def dcgm_url(self, node: str) -> str:
        return f"{self.url}{dcgm_path(node)}"

    @property
    def ksm_url(self) -> str:
        return f"{self.url}{KSM_PATH}"


KSM_PATH = "/ksm/metrics"


def dcgm_path(node: str) -> str:
    return f"/dcgm/{node}/metrics"


def node_path(node: str) -> str:
    return f"/node/{node}/metrics"


def dcgm_instance(node: str) -> str:
    """The ``instance`` label of a node's dcgm-exporter target (as if scraped at node:9400)."""
    return f"{node}:{DCGM_PORT}"


def target_labels(job: str, node: str | None = None) -> dict[str, str]:
    """The labels Prometheus adds to every series of a target (``job``, ``instance``)."""
    if job == DCGM_JOB:
        if node is None:
            raise ValueError("a dcgm-exporter target needs its node")
        return {"job": DCGM_JOB, "instance": dcgm_instance(node)}
    if job == NODE_JOB:
        if node is None:
            raise ValueError("a node-exporter target needs its node")
        return {"job": NODE_JOB, "instance": f"{node}:{NODE_PORT}"}
    return {"job": KSM_JOB, "instance": KSM_INSTANCE}


def scrape_config(
    server_url: str,
    nodes: Iterable[state.SimNode | str],
    *,
    scrape_interval: str | None = None,
) -> dict[str, Any]:
    """``{"scrape_configs": [...]}`` for Prometheus: job ``dcgm-exporter`` with one target per
    node (its own ``__metrics_path__`` and ``instance``) and job ``kube-state-metrics``.

    No ``node`` target label is added: real dcgm-exporter series name the node only in
    ``Hostname``/``hostname``, and queries must join through it as they would in a cluster.
    """
    address = urlsplit(server_url).netloc
    names = [n if isinstance(n, str) else n.name for n in nodes]
    dcgm_targets = [
        {
            "targets": [address],
            "labels": {"__metrics_path__": dcgm_path(name), "instance": dcgm_instance(name)},
        }
        for name in names
    ]
    node_targets = [
        {
            "targets": [address],
            "labels": {"__metrics_path__": node_path(name), "instance": f"{name}:{NODE_PORT}"},
        }
        for name in names
    ]
    ksm_targets = [{"targets": [address], "labels": {"instance": KSM_INSTANCE}}]
    jobs: list[dict[str, Any]] = [
        {"job_name": DCGM_JOB, "static_configs": dcgm_targets},
        {"job_name": NODE_JOB, "static_configs": node_targets},
        {"job_name": KSM_JOB, "metrics_path": KSM_PATH, "static_configs": ksm_targets},
    ]
    if scrape_interval is not None:
        for job in jobs:
            job["scrape_interval"] = scrape_interval
    return {"scrape_configs": jobs}


def render_path(world: MetricsWorld, path: str) -> tuple[int, str]:
    """(HTTP status, body) for a request path: the whole routing, testable without sockets."""
    now = world.clock.now()
    if path == KSM_PATH:
        return 200, exporters.render_ksm(world.store, now)
    parts = path.strip("/").split("/")
    if len(parts) != 3 or parts[0] not in ("dcgm", "node") or parts[2] != "metrics":
        return 404, f"no such endpoint: {path}\n"
    node = next((n for n in world.nodes if n.name == parts[1]), None)
    if node is None:
        return 404, f"no such node: {parts[1]}\n"
    if not exporters.exporter_up(node, now):
        return 503, f"{parts[0]} exporter on {node.name} is not running\n"
    if parts[0] == "node":
        return 200, fleet_exporters.render_node_exporter(node, now)
    pods = exporters.pods_by_gpu(node, world.store, now)
    families = exporters.dcgm_families(node, pods, now, xid_count_metric=node.xid_count_metric)
    return 200, exposition.to_text(families + fleet_exporters.dcgm_health_families(node, now))


def _handler(world: MetricsWorld) -> type[httpserver.BaseHTTPRequestHandler]:
    class Handler(httpserver.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            try:
                status, body = render_path(world, urlsplit(self.path).path)
            except Exception as e:  # the world must never take the server down
                status, body = 500, f"render failed: {type(e).__name__}: {e}\n"
            reply(self, status, CONTENT_TYPE, body.encode())

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: Prometheus scrapes every second."""

    return Handler


def reply(
    handler: httpserver.BaseHTTPRequestHandler, status: int, content_type: str, data: bytes
) -> None:
    """Send one complete answer: status, type, length, body."""
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


@contextmanager
def serve(world: MetricsWorld, host: str = "127.0.0.1", port: int = 0) -> Iterator[MetricsServer]:
    """Serve ``world``'s metric endpoints on ``host:port`` (0: a free port) until exit."""
    with serving(_handler(world), host, port, "sim-metrics") as url:
        yield MetricsServer(url)


@contextmanager
def serving(
    handler: type[httpserver.BaseHTTPRequestHandler], host: str, port: int, name: str
) -> Iterator[str]:
    """Run ``handler`` on ``host:port`` (0: a free port) in a thread named ``name``; yields the
    URL, stops the server on exit."""
    httpd = httpserver.ThreadingHTTPServer((host, port), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, name=name, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{httpd.server_port}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
