"""Which pods hold which GPUs, from the kubelet's PodResources API (v1 ``List``).

The kubelet serves ``v1.PodResourcesLister`` over gRPC on a unix socket
(``/var/lib/kubelet/pod-resources/kubelet.sock``; Kubernetes docs, "Monitoring device plugin
resources"). It is exact for every pod — dcgm-exporter's pod labels map only the pods it
saw — so the agent reads it when the opt-in mounts the socket (docs/gpu-isolation.md#pods).

No gRPC library: a unary call is one HTTP/2 POST with prior knowledge (``clients.unix_grpc``),
whose body is a 5-byte frame header (compressed flag, big-endian length) and the protobuf
message (gRPC "PROTOCOL-HTTP2" spec). The request is the empty message; the response is
decoded here by hand, only the fields gpuguard reads (k8s.io/kubelet podresources v1
``api.proto``)::

    ListPodResourcesResponse { repeated PodResources pod_resources = 1; }
    PodResources { string name = 1; string namespace = 2;
                   repeated ContainerResources containers = 3; }
    ContainerResources { string name = 1; repeated ContainerDevices devices = 2; ... }
    ContainerDevices { string resource_name = 1; repeated string device_ids = 2; ... }

Every other field (CPU IDs, memory, topology, DRA resources) is skipped by its wire type.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gpuguard.clients import unix_grpc
from gpuguard.errors import SourceError

SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
LIST_PATH = "/v1.PodResourcesLister/List"
EMPTY_REQUEST = b"\x00\x00\x00\x00\x00"  # not compressed, length 0: ListPodResourcesRequest{}
TIMEOUT_S = 5.0
MAX_MESSAGE = 16 * 1024 * 1024  # the kubelet's own gRPC message limit
VARINT, I64, LEN, I32 = 0, 1, 2, 5  # protobuf wire types (protobuf.dev "Encoding")


class DecodeError(SourceError):
    """The kubelet's answer is not a ListPodResourcesResponse (the message says where)."""


@dataclass(frozen=True, slots=True)
class DeviceUse:
    """One container's devices of one resource (``nvidia.com/gpu``: GPU UUIDs)."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: tuple[str, ...]


def pods_on(uses: tuple[DeviceUse, ...], device_id: str) -> tuple[DeviceUse, ...]:
    """The containers holding ``device_id``."""
    return tuple(u for u in uses if device_id in u.device_ids)


def unframe(body: bytes) -> bytes:
    """The one message of a unary gRPC response body."""
    if len(body) < 5:
        raise DecodeError(f"gRPC body of {len(body)} bytes: no message frame")
    compressed, length = struct.unpack(">BI", body[:5])
    if compressed:
        raise DecodeError("gRPC message is compressed; gpuguard asked for none")
    if length > len(body) - 5:
        raise DecodeError(f"gRPC frame says {length} bytes, {len(body) - 5} arrived")
    return body[5 : 5 + length]


def decode_list(message: bytes) -> tuple[DeviceUse, ...]:
    """A ListPodResourcesResponse's device uses, one per container and resource."""
    uses: list[DeviceUse] = []
    for field, value in _fields(message, "ListPodResourcesResponse"):
        if field == 1 and isinstance(value, bytes):
            uses.extend(_pod(value))
    return tuple(uses)


def _pod(message: bytes) -> Iterator[DeviceUse]:
    name = namespace = ""
    containers: list[bytes] = []
    for field, value in _fields(message, "PodResources"):
        if isinstance(value, bytes):
            if field == 1:
                name = _text(value, "PodResources.name")
            elif field == 2:
                namespace = _text(value, "PodResources.namespace")
            elif field == 3:
                containers.append(value)
    for container in containers:
        yield from _container(namespace, name, container)


def _container(namespace: str, pod: str, message: bytes) -> Iterator[DeviceUse]:
    name = ""
    devices: list[bytes] = []
    for field, value in _fields(message, "ContainerResources"):
        if isinstance(value, bytes):
            if field == 1:
                name = _text(value, "ContainerResources.name")
            elif field == 2:
                devices.append(value)
    for device in devices:
        resource, ids = _devices(device)
        yield DeviceUse(namespace, pod, name, resource, ids)


def _devices(message: bytes) -> tuple[str, tuple[str, ...]]:
    resource, ids = "", []
    for field, value in _fields(message, "ContainerDevices"):
        if isinstance(value, bytes):
            if field == 1:
                resource = _text(value, "ContainerDevices.resource_name")
            elif field == 2:
                ids.append(_text(value, "ContainerDevices.device_ids"))
    return resource, tuple(ids)


def _fields(data: bytes, message: str) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of each field: an int for varints, bytes for length-delimited;
    fixed-width fields are skipped."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at, message)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise DecodeError(f"{message}: field number 0 at byte {at}")
        if wire == VARINT:
            value, at = _varint(data, at, message)
            yield field, value
        elif wire == LEN:
            length, at = _varint(data, at, message)
            if at + length > len(data):
                raise DecodeError(f"{message}: field {field} runs past the end")
            yield field, data[at : at + length]
            at += length
        elif wire in (I64, I32):
            at += 8 if wire == I64 else 4
            if at > len(data):
                raise DecodeError(f"{message}: field {field} runs past the end")
        else:
            raise DecodeError(f"{message}: field {field} has wire type {wire}")


def _varint(data: bytes, at: int, message: str) -> tuple[int, int]:
    value = shift = 0
    while at < len(data) and shift < 64:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
    raise DecodeError(f"{message}: a varint is cut or longer than 10 bytes at byte {at}")


def _text(value: bytes, what: str) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DecodeError(f"{what} is not UTF-8") from e


class KubeletPodResources:
    """The kubelet's PodResources ``List`` over its unix socket."""

    def __init__(self, socket: Path = SOCKET, timeout_s: float = TIMEOUT_S) -> None:
        self.socket = socket
        self._timeout_s = timeout_s

    def list(self) -> tuple[DeviceUse, ...]:
        """Every container's devices now; SourceError when the kubelet does not answer."""
        self._probe()
        what = f"kubelet PodResources at {self.socket}"
        answer = unix_grpc.unary_call(self.socket, LIST_PATH, EMPTY_REQUEST, self._timeout_s, what)
        if answer.http_status != 200 or answer.grpc_status != "0":
            raise SourceError(
                f"{what}: HTTP {answer.http_status}, "
                f"grpc-status {answer.grpc_status} {answer.grpc_message}".strip()
            )
        if len(answer.body) > MAX_MESSAGE + 5:
            raise DecodeError(f"kubelet PodResources answer of {len(answer.body)} bytes")
        return decode_list(unframe(answer.body))

    def _probe(self) -> None:
        """Connect once first: a kubelet that is down (no socket, or a stale one refusing)
        is named plainly, and no half-open socket is left behind by the HTTP client."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(self._timeout_s)
            try:
                probe.connect(str(self.socket))
            except OSError as e:
                why = e.strerror or type(e).__name__
                raise SourceError(f"kubelet PodResources at {self.socket}: {why}") from e
