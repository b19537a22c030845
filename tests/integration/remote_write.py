"""Feed a real Prometheus a recorded history by remote write, with staleness markers.

A history backfilled with promtool has no staleness markers, so a series that vanished is
still read for the 5-minute lookback delta. A Prometheus that scraped the targets itself
writes a marker at the first scrape that misses a series, or that fails
(https://prometheus.io/docs/prometheus/latest/querying/basics/#staleness). This module
writes the same markers into a ``HistoryRecorder``'s series and pushes them over the
remote-write 1.0 protocol (https://prometheus.io/docs/specs/remote_write_spec/): a snappy
*block* of a protobuf ``prometheus.WriteRequest``. Both encodings are written here by hand
(literal-only snappy, four protobuf message types), so no dependency is added.

Historical samples need the TSDB's out-of-order window (``storage.tsdb
.out_of_order_time_window``, Prometheus >= 2.39); ``served`` sets it and the receiver flag.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from gpuguard.sim import history
from tests.integration import prometheus

# Prometheus' value.StaleNaN: a NaN only the TSDB's staleness handling tells apart.
STALE_NAN_BITS = 0x7FF0000000000002
STALE_NAN: float = struct.unpack("<d", struct.pack("<Q", STALE_NAN_BITS))[0]
HEADERS = {
    "Content-Encoding": "snappy",
    "Content-Type": "application/x-protobuf",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
}
BATCH_BYTES = 1 << 20
Labels = Sequence[tuple[str, str]]
Series = tuple[Labels, list[tuple[int, float]]]  # labels with __name__, (ms, value) samples


class SnappyError(ValueError):
    """A snappy block that this module's decoder cannot read."""


# --- protobuf wire format (https://protobuf.dev/programming-guides/encoding/) ---


def varint(n: int) -> bytes:
    """An unsigned LEB128 varint; negative int64s as their 64-bit two's complement."""
    n &= (1 << 64) - 1
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def label(name: str, value: str) -> bytes:
    return _field(1, name.encode()) + _field(2, value.encode())


def sample(value: float, timestamp_ms: int) -> bytes:
    """``Sample{double value = 1; int64 timestamp = 2}``: fixed64 then varint."""
    return b"\x09" + struct.pack("<d", value) + b"\x10" + varint(timestamp_ms)


def time_series(labels: Labels, samples: Iterable[tuple[int, float]]) -> bytes:
    body = b"".join(_field(1, label(n, v)) for n, v in labels)
    return body + b"".join(_field(2, sample(v, t)) for t, v in samples)


def write_request(series: Iterable[Series]) -> bytes:
    """``WriteRequest{repeated TimeSeries timeseries = 1}``."""
    return b"".join(_field(1, time_series(labels, samples)) for labels, samples in series)


# --- snappy block format (https://github.com/google/snappy/blob/main/format_description.txt)


def snappy_block(data: bytes, chunk: int = 1 << 16) -> bytes:
    """``data`` as a valid snappy block of literals only (no compression)."""
    out = bytearray(varint(len(data)))
    for start in range(0, len(data), chunk):
        piece = data[start : start + chunk]
        out += _literal_tag(len(piece)) + piece
    return bytes(out)


def _literal_tag(length: int) -> bytes:
    """Tag byte 0b00 with length-1 inline below 60, else 60..63 and 1-4 length bytes."""
    if length <= 60:
        return bytes([(length - 1) << 2])
    extra = ((length - 1).bit_length() + 7) // 8
    return bytes([(59 + extra) << 2]) + (length - 1).to_bytes(extra, "little")


def snappy_literals(block: bytes) -> bytes:
    """Decode a literal-only snappy block (what ``snappy_block`` writes); for tests."""
    length, pos = _read_varint(block, 0)
    out = bytearray()
    while pos < len(block):
        tag = block[pos]
        if tag & 3:
            raise SnappyError(f"copy element at byte {pos}: only literals are decoded")
        size, pos = tag >> 2, pos + 1
        if size >= 60:
            extra = size - 59
            size, pos = int.from_bytes(block[pos : pos + extra], "little"), pos + extra
        out += block[pos : pos + size + 1]
        pos += size + 1
    if len(out) != length:
        raise SnappyError(f"block says {length} bytes, literals hold {len(out)}")
    return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        byte = data[pos]
        n |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if byte < 0x80:
            return n, pos


# --- staleness: what a scraping Prometheus would have stored ---


def with_staleness(recorder: history.HistoryRecorder) -> Iterator[Series]:
    """Every recorded series as remote-write samples, with a staleness marker at the first
    scrape of its target (a time in the target's ``up`` series) that did not return it."""
    recorded = list(recorder.series())
    scrapes = {
        _target(labels): list(times) for name, labels, times, _ in recorded if name == history.UP
    }
    for name, labels, times, values in recorded:
        points = [(round(t * 1000), v) for t, v in zip(times, values, strict=True)]
        if name != history.UP:
            points = _marked(points, [round(t * 1000) for t in scrapes.get(_target(labels), [])])
        yield (("__name__", name), *labels), points


def _target(labels: Labels) -> tuple[str, str]:
    found = dict(labels)
    return found.get("job", ""), found.get("instance", "")


def _marked(points: list[tuple[int, float]], scrapes: list[int]) -> list[tuple[int, float]]:
    """``points`` plus a StaleNaN at each first scrape after a sample that has no sample."""
    present = {t for t, _ in points}
    out: list[tuple[int, float]] = []
    seen = False
    values = dict(points)
    for t in sorted(present | {s for s in scrapes if s > points[0][0]}):
        if t in present:
            out.append((t, values[t]))
            seen = True
        elif seen:
            out.append((t, STALE_NAN))
            seen = False
    return out


def batches(series: Iterable[Series], limit: int = BATCH_BYTES) -> Iterator[bytes]:
    """Encoded ``WriteRequest`` bodies of about ``limit`` bytes (before snappy)."""
    pending: list[bytes] = []
    size = 0
    for labels, samples in series:
        encoded = _field(1, time_series(labels, samples))
        pending.append(encoded)
        size += len(encoded)
        if size >= limit:
            yield b"".join(pending)
            pending, size = [], 0
    if pending:
        yield b"".join(pending)


def push(prom: prometheus.Prometheus, series: Iterable[Series]) -> int:
    """POST ``series`` to ``/api/v1/write``; returns the number of requests."""
    sent = 0
    for body in batches(series):
        response = prom.client.post(
            f"{prom.url}/api/v1/write", content=snappy_block(body), headers=HEADERS
        )
        if response.status_code // 100 != 2:
            raise prometheus.PrometheusError(
                f"remote write: HTTP {response.status_code}: {response.text}\n{prom.log()}"
            )
        sent += 1
    return sent


@contextmanager
def served(
    recorder: history.HistoryRecorder, workdir: Path, *, ooo_window: str = "30d",
    version: str = prometheus.DEBIAN,
) -> Iterator[prometheus.Prometheus]:
    """A fresh Prometheus ``version`` (no scrapes) holding ``recorder``'s history with
    staleness markers; samples older than ``ooo_window`` would be refused as out of bounds."""
    config = {
        "global": {"scrape_interval": "1m"},
        "storage": {"tsdb": {"out_of_order_time_window": ooo_window}},
    }
    with prometheus.running(
        config, workdir / "tsdb", retention="3650d", receive_remote_write=True, keep_head=True,
        version=version,
    ) as prom:
        push(prom, with_staleness(recorder))
        yield prom
