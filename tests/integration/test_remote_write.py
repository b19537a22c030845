"""Remote write into a real Prometheus (``tests.integration.remote_write``): the hand-written
protobuf and snappy encodings against bytes worked out from their specifications, the
staleness markers a scraping Prometheus would write, and a vanished series that is gone at
once when remote-written, where the promtool backfill of the same history reads it for five
more minutes."""

from __future__ import annotations

import math
import random
import struct
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpuguard.sim import exporters, history
from tests.integration import prometheus, remote_write

SCRAPE = timedelta(seconds=15)
TARGET = {"job": "dcgm-exporter", "instance": "gpu-node-a"}


def test_varints_are_little_endian_base_128_and_int64_negatives_take_ten_bytes() -> None:
    assert remote_write.varint(1) == b"\x01"
    assert remote_write.varint(300) == b"\xac\x02"
    assert remote_write.varint(-1) == b"\xff" * 9 + b"\x01"


def test_a_write_request_is_encoded_field_by_field() -> None:
    name = bytes.fromhex("0a08") + b"__name__" + bytes.fromhex("1202") + b"up"  # Label, 14 B
    one_at_1s = bytes.fromhex("09000000000000f03f10e807")  # Sample{1.0, 1000}, 12 B
    series = bytes.fromhex("0a0e") + name + bytes.fromhex("120c") + one_at_1s  # 30 B
    request = remote_write.write_request([((("__name__", "up"),), [(1000, 1.0)])])
    assert request == bytes.fromhex("0a1e") + series


@pytest.mark.parametrize(
    ("size", "header"),
    [(3, "0308"), (60, "3cec"), (100, "64f063"), (300, "ac02f42b01"), (65536, "808004f4ffff")],
)
def test_snappy_literals_carry_their_length_inline_or_in_one_to_four_bytes(
    size: int, header: str
) -> None:
    data = bytes(random.Random(size).randrange(256) for _ in range(size))
    block = remote_write.snappy_block(data)
    assert block == bytes.fromhex(header) + data
    assert remote_write.snappy_literals(block) == data


def test_a_long_block_is_split_into_literals_that_decode_back() -> None:
    data = bytes(random.Random(7).randrange(256) for _ in range(70_000))
    assert remote_write.snappy_literals(remote_write.snappy_block(data)) == data
    assert remote_write.snappy_literals(remote_write.snappy_block(data, chunk=7)) == data


def test_the_staleness_marker_is_prometheus_stale_nan() -> None:
    assert math.isnan(remote_write.STALE_NAN)
    assert struct.pack("<d", remote_write.STALE_NAN) == struct.pack("<Q", 0x7FF0000000000002)


def recorded(
    t0: datetime, scrapes: int, gone_after: int, *, failed: int = -1
) -> history.HistoryRecorder:
    """A target scraped ``scrapes`` times: GPU 0 always, GPU 1 only ``gone_after`` times;
    scrape number ``failed`` fails (``up`` 0, no samples)."""
    recorder = history.HistoryRecorder()
    for i in range(scrapes):
        gpus = ["0", "1"] if i < gone_after else ["0"]
        samples = tuple(exporters.Sample((("gpu", gpu),), 90.0) for gpu in gpus)
        families = [exporters.Family("DCGM_FI_DEV_GPU_UTIL", "gauge", "", samples)]
        up = i != failed
        recorder.add(families if up else [], TARGET, t0 + SCRAPE * i, up=up)
    return recorder


def test_a_series_gets_one_marker_at_the_first_scrape_without_it() -> None:
    t0 = datetime(2026, 9, 21, tzinfo=UTC)
    ms = [round((t0 + SCRAPE * i).timestamp() * 1000) for i in range(6)]
    series = {
        dict(labels).get("gpu", dict(labels)["__name__"]): samples
        for labels, samples in remote_write.with_staleness(recorded(t0, 6, 2, failed=4))
    }
    stale = [t for t, v in series["1"] if math.isnan(v)]
    assert stale == [ms[2]]
    assert [t for t, v in series["0"] if math.isnan(v)] == [ms[4]]  # the failed scrape
    assert [t for t, v in series["0"] if not math.isnan(v)] == ms[:4] + ms[5:]
    assert not any(math.isnan(v) for _, v in series["up"])


@pytest.mark.integration
def test_a_vanished_series_is_gone_at_once_when_remote_written_not_five_minutes_later(
    tmp_path: Path,
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    t0 = now - timedelta(days=3) - timedelta(seconds=now.timestamp() % 15)
    recorder = recorded(t0, 40, 10)
    gone = t0 + SCRAPE * 10
    query = 'DCGM_FI_DEV_GPU_UTIL{gpu="1"}'
    with remote_write.served(recorder, tmp_path / "rw") as prom:
        assert prom.query(query, gone - timedelta(seconds=1))
        assert prom.query(query, gone) == []
        assert prom.query(query, gone + timedelta(minutes=1)) == []
        assert len(prom.query("DCGM_FI_DEV_GPU_UTIL", gone + timedelta(minutes=1))) == 1
    recorder.write_openmetrics(tmp_path / "history.om")
    with prometheus.from_openmetrics(tmp_path / "history.om", tmp_path / "om") as prom:
        assert prom.query(query, gone + timedelta(minutes=1))  # what the backfill lingers
