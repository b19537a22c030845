"""A small /metrics + /healthz server in a background thread, for any gpuguard process.

It takes the exposition as a function (``generate_latest`` of the caller's own registry) and
a health predicate, so the agent and the guard can serve their metrics the same way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client.exposition import CONTENT_TYPE_LATEST

Exposition = Callable[[], bytes]
Healthy = Callable[[], bool]


@contextmanager
def serve(
    exposition: Exposition,
    healthy: Healthy,
    host: str = "0.0.0.0",
    port: int = 0,
    ready: Healthy | None = None,
) -> Iterator[ThreadingHTTPServer]:
    """/metrics, /healthz (200 while ``healthy()``, else 503) and /readyz (``ready()``, or
    ``healthy()`` when not given); stopped on exit."""
    server = ThreadingHTTPServer((host, port), _handler(exposition, healthy, ready or healthy))
    thread = threading.Thread(target=server.serve_forever, name="gpuguard-http", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _handler(
    exposition: Exposition, healthy: Healthy, ready: Healthy
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            if self.path.startswith("/metrics"):
                self._reply(200, exposition(), CONTENT_TYPE_LATEST)
            elif self.path.startswith("/healthz"):
                ok = healthy()
                self._reply(200 if ok else 503, b"ok\n" if ok else b"stale\n", "text/plain")
            elif self.path.startswith("/readyz"):
                ok = ready()
                self._reply(200 if ok else 503, b"ok\n" if ok else b"not ready\n", "text/plain")
            else:
                self._reply(404, b"not found\n", "text/plain")

        def _reply(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler
