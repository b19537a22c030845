"""The simulated kubelet's PodResources API: ``v1.PodResourcesLister/List`` over a unix socket.

What the kubelet serves (Kubernetes docs, "Monitoring device plugin resources";
k8s.io/kubelet podresources v1 ``api.proto``): for each pod on the node, each container's
devices per resource name — for ``nvidia.com/gpu`` the device IDs the device plugin handed out,
GPU UUIDs under the NVIDIA plugin's default ``deviceIDStrategy: uuid``. The world's workloads
are the pods; each has one container, ``main`` (``sim.kube_objects``).

The transport is real: gRPC over HTTP/2 (prior knowledge, ``h2``), one unary response —
headers, one length-prefixed message, trailers with ``grpc-status: 0`` (gRPC "PROTOCOL-HTTP2");
an unknown method gets ``grpc-status: 12`` (UNIMPLEMENTED) as a trailers-only response.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType

import h2.config
import h2.connection
import h2.events
import h2.exceptions

from gpuguard.sim import state

LIST_PATH = "/v1.PodResourcesLister/List"
GPU_RESOURCE = "nvidia.com/gpu"
CONTAINER = "main"
Container = tuple[str, str, str, str, tuple[str, ...]]  # namespace, pod, container, resource, ids


def containers(node: state.SimNode) -> list[Container]:
    """The node's running workloads as PodResources containers (GPU UUIDs as device IDs)."""
    by_index = {g.index: g.uuid for g in node.gpus}
    return [
        (w.namespace, w.pod, CONTAINER, GPU_RESOURCE, tuple(by_index[i] for i in w.gpus))
        for w in node.workloads
    ]


def encode_list(found: Iterable[Container]) -> bytes:
    """A ListPodResourcesResponse (protobuf wire format, protobuf.dev "Encoding")."""
    pods = b""
    for namespace, pod, container, resource, ids in found:
        device = _text(1, resource) + b"".join(_text(2, i) for i in ids)
        resources = _text(1, container) + _message(2, device)
        pods += _message(1, _text(1, pod) + _text(2, namespace) + _message(3, resources))
    return pods


def frame(message: bytes) -> bytes:
    return struct.pack(">BI", 0, len(message)) + message


def _varint(value: int) -> bytes:
    out = b""
    while True:
        low, value = value & 0x7F, value >> 7
        if not value:
            return out + bytes([low])
        out += bytes([low | 0x80])


def _message(field: int, body: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(body)) + body


def _text(field: int, text: str) -> bytes:
    return _message(field, text.encode())


def _str(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class PodResourcesServer:
    """Serves ``List`` on ``path`` from ``answer()`` (the encoded response) in a thread."""

    def __init__(self, path: Path, answer: Callable[[], bytes]) -> None:
        self.path = path
        self._answer = answer
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> PodResourcesServer:
        self._listener.bind(str(self.path))
        self._listener.listen()
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() (Linux)
        self._listener.close()
        self._thread.join(timeout=5)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            with conn, contextlib.suppress(OSError, h2.exceptions.H2Error):
                self._serve(conn)  # a client that hangs up mid-call ends only its connection

    def _serve(self, conn: socket.socket) -> None:
        h2conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        )
        h2conn.initiate_connection()
        conn.sendall(h2conn.data_to_send())
        paths: dict[int, str] = {}
        while data := conn.recv(65536):
            for event in h2conn.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    headers = {_str(k): _str(v) for k, v in event.headers or ()}
                    paths[event.stream_id or 0] = headers.get(":path", "")
                elif isinstance(event, h2.events.DataReceived):
                    h2conn.acknowledge_received_data(
                        event.flow_controlled_length or 0, event.stream_id or 0)
                elif isinstance(event, h2.events.StreamEnded):
                    stream = event.stream_id or 0
                    self._respond(h2conn, stream, paths.pop(stream, ""))
            conn.sendall(h2conn.data_to_send())

    def _respond(self, h2conn: h2.connection.H2Connection, stream: int, path: str) -> None:
        headers = [(":status", "200"), ("content-type", "application/grpc")]
        if path != LIST_PATH:
            h2conn.send_headers(stream, [*headers, ("grpc-status", "12")], end_stream=True)
            return
        h2conn.send_headers(stream, headers)
        h2conn.send_data(stream, frame(self._answer()))
        h2conn.send_headers(stream, [("grpc-status", "0")], end_stream=True)
