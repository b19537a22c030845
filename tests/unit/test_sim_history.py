"""Recorded exporter history is valid OpenMetrics, labelled as Prometheus would label it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import metrics_core
from prometheus_client.openmetrics import parser

from gpuguard.model import metric_names as mn
from gpuguard.sim import history, state, store

T0 = datetime(2026, 9, 18, 0, 0, tzinfo=UTC)
STEP = timedelta(seconds=15)


def make_node(name: str, gpus: int = 2) -> state.SimNode:
    node = state.SimNode(name, "boot", "580.95.05", "580.95.05")
    node.gpus = [
        state.SimGpu(i, state.new_uuid(f"{name}/{i}"), f"0000:{0x18 + i:02x}:00.0", "NVIDIA H100")
        for i in range(gpus)
    ]
    return node


def make_store(*names: str) -> store.ObjectStore:
    objects = store.ObjectStore()
    for name in names:
        gpus = {"nvidia.com/gpu": "2"}
        objects.create("Node", "", {"metadata": {"name": name},
                                    "status": {"capacity": gpus, "allocatable": gpus}})  # fmt: skip
    objects.create("Pod", "gpu-operator", {
        "metadata": {"name": "gfd-1"},
        "spec": {"nodeName": names[0], "containers": [{"name": "gfd"}]},
        "status": {"phase": "Running", "containerStatuses": [{"name": "gfd", "restartCount": 3}]},
    })  # fmt: skip
    return objects


def record(steps: int = 8, fault_at: int = 4) -> tuple[history.HistoryRecorder, state.SimNode]:
    nodes = [make_node("node-a"), make_node("node-b")]
    objects = make_store("node-a", "node-b")
    rec = history.HistoryRecorder()
    for i in range(steps):
        now = T0 + i * STEP
        if i == fault_at:
            nodes[1].gpu(1).xid_history.append((now, 79))
        rec.sample(nodes, objects, now)
    return rec, nodes[1]


def parse(path: Path) -> dict[str, metrics_core.Metric]:
    return {f.name: f for f in parser.text_string_to_metric_families(path.read_text())}


def test_history_is_valid_openmetrics(tmp_path: Path) -> None:
    rec, _ = record()
    out = tmp_path / "h.om"
    written = rec.write_openmetrics(out)
    assert written == rec.sample_count > 0
    assert out.read_text().endswith("# EOF\n")
    fams = parse(out)  # the strict parser: grouping, ordering and types all checked
    assert sum(len(f.samples) for f in fams.values()) == written


def test_samples_carry_the_scrape_labels_and_timestamps(tmp_path: Path) -> None:
    rec, node_b = record()
    out = tmp_path / "h.om"
    rec.write_openmetrics(out)
    fams = parse(out)
    (xid,) = {s.labels["instance"]: s for s in fams[mn.DCGM_XID_LAST].samples if s.value}.values()
    assert xid.labels["job"] == "dcgm-exporter"
    assert xid.labels["instance"] == "node-b:9400"
    assert xid.labels["Hostname"] == "node-b"
    assert xid.labels["UUID"] == node_b.gpu(1).uuid
    times = sorted(float(s.timestamp) for s in fams[mn.DCGM_XID_LAST].samples)
    assert times[0] == (T0 + 4 * STEP).timestamp()  # absent before the fault
    ksm = fams[mn.KSM_NODE_CAPACITY].samples[0]
    assert (ksm.labels["job"], ksm.labels["instance"]) == (
        "kube-state-metrics",
        "kube-state-metrics:8080",
    )


def test_up_is_recorded_per_target_and_zero_while_a_node_is_down(tmp_path: Path) -> None:
    nodes = [make_node("node-a")]
    nodes[0].down_until = T0 + 2 * STEP
    rec = history.HistoryRecorder()
    for i in range(4):
        rec.sample(nodes, make_store("node-a"), T0 + i * STEP)
    out = tmp_path / "h.om"
    rec.write_openmetrics(out)
    fams = parse(out)
    dcgm_up = [s.value for s in fams["up"].samples if s.labels["job"] == "dcgm-exporter"]
    assert dcgm_up == [0, 0, 1, 1]
    util_times = [float(s.timestamp) for s in fams[mn.DCGM_GPU_UTIL].samples]
    assert min(util_times) == (T0 + 2 * STEP).timestamp()


def test_counters_are_typed_for_openmetrics(tmp_path: Path) -> None:
    rec, _ = record(steps=2)
    out = tmp_path / "h.om"
    rec.write_openmetrics(out)
    text = out.read_text()
    assert f"# TYPE {mn.DCGM_UNCORRECTABLE_REMAPPED_ROWS} unknown\n" in text
    assert "# TYPE kube_pod_container_status_restarts counter\n" in text
    assert f'{mn.KSM_CONTAINER_RESTARTS}{{container="gfd"' in text
    assert text.count(f"# TYPE {mn.DCGM_GPU_UTIL} gauge\n") == 1


def test_each_series_is_contiguous_and_in_time_order(tmp_path: Path) -> None:
    rec, _ = record(steps=6)
    out = tmp_path / "h.om"
    rec.write_openmetrics(out)
    seen: list[str] = []
    last_t: dict[str, float] = {}
    for line in out.read_text().splitlines():
        if line.startswith("#"):
            continue
        series, _value, stamp = line.rsplit(" ", 2)
        t = float(stamp)
        if not seen or seen[-1] != series:
            assert series not in seen
            seen.append(series)
        assert t >= last_t.get(series, 0)
        last_t[series] = t


def test_time_must_move_forward() -> None:
    rec = history.HistoryRecorder()
    nodes = [make_node("node-a")]
    rec.sample(nodes, make_store("node-a"), T0)
    with pytest.raises(ValueError, match="must move forward"):
        rec.sample(nodes, make_store("node-a"), T0)


def test_clashing_exporter_labels_become_exported() -> None:
    labels = history.scraped_labels(
        (("job", "x"), ("gpu", "0")), {"job": "dcgm-exporter", "instance": "a"}
    )
    assert labels == (
        ("exported_job", "x"),
        ("gpu", "0"),
        ("instance", "a"),
        ("job", "dcgm-exporter"),
    )


@pytest.mark.parametrize(
    ("t", "text"), [(1757000000.0, "1757000000"), (1757000000.25, "1757000000.250")]
)
def test_timestamps_are_seconds(t: float, text: str) -> None:
    assert history.format_timestamp(t) == text


def test_interval_skips_scrapes_closer_than_it() -> None:
    rec = history.HistoryRecorder(interval=timedelta(minutes=1))
    nodes, objects = [make_node("node-a")], make_store("node-a")
    kept = [rec.sample(nodes, objects, T0 + i * STEP) for i in range(9)]
    assert kept == [True, False, False, False, True, False, False, False, True]


def test_write_a_time_window_only(tmp_path: Path) -> None:
    rec, _ = record(steps=8)
    out = tmp_path / "h.om"
    rec.write_openmetrics(out, start=T0 + 2 * STEP, end=T0 + 3 * STEP)
    stamps = {float(s.timestamp) for f in parse(out).values() for s in f.samples}
    assert stamps == {(T0 + 2 * STEP).timestamp(), (T0 + 3 * STEP).timestamp()}
