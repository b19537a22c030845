"""One unary gRPC call over a unix socket, without a gRPC library: an HTTP/2 POST with prior
knowledge (``httpx`` with ``h2``) whose body is the framed request (gRPC "PROTOCOL-HTTP2"
spec). The kubelet's PodResources API is the one gRPC server gpuguard calls
(``agent.podresources`` frames the request and decodes the answer); the wire is here, so
``clients`` stays the only package that speaks HTTP (the import contract in pyproject.toml).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx

from gpuguard.errors import SourceError

_HEADERS = {"content-type": "application/grpc", "te": "trailers"}


@dataclass(frozen=True, slots=True)
class Answer:
    """What the server answered: the HTTP status, the gRPC status and message (a
    trailers-only error answer carries them as headers), and the framed body."""

    http_status: int
    grpc_status: str
    grpc_message: str
    body: bytes


def unary_call(
    socket_path: Path, method: str, framed_request: bytes, timeout_s: float, what: str
) -> Answer:
    """POST ``framed_request`` to ``method`` (``/package.Service/Method``) on the server at
    ``socket_path``; SourceError naming ``what`` when the call fails on the wire."""
    transport = httpx.HTTPTransport(uds=str(socket_path), http1=False, http2=True)
    try:
        with httpx.Client(transport=transport, timeout=timeout_s) as client:
            response = client.post(
                f"http://localhost{method}", content=framed_request, headers=_HEADERS
            )
    except httpx.HTTPError as e:
        raise SourceError(f"{what}: {e}") from e
    headers = response.headers
    return Answer(response.status_code, headers.get("grpc-status", "0"),
                  headers.get("grpc-message", ""), response.content)  # fmt: skip
