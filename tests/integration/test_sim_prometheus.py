"""The simulator's endpoints, read by a real Prometheus: live scrapes and backfilled history.

What gpuguard's Prometheus source will ask must work on the real server: the Xid gauge by
value, the GPU loss as capacity - allocatable, the seed's Hostname -> node join, and the
"24 h ago" comparison over days of backfilled simulated history.
"""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpuguard.model import metric_names as mn
from gpuguard.model import settings as settings_model
from gpuguard.policy import interconnect
from gpuguard.sim import history, metrics_server, state, store
from gpuguard.sources import fleet_health
from gpuguard.sources import prometheus as sources_prometheus
from tests import tools
from tests.integration import prometheus

pytestmark = pytest.mark.integration
FLEET = settings_model.FleetHealthSettings()

STEP = timedelta(seconds=15)
GPU_MISSING = (
    f'{mn.KSM_NODE_CAPACITY}{{resource="{mn.GPU_RESOURCE_LABEL}"}}'
    f' - {mn.KSM_NODE_ALLOCATABLE}{{resource="{mn.GPU_RESOURCE_LABEL}"}}'
)
GPU_LOSS = f"{GPU_MISSING} > 0"
GPU_LOSS_HELD = f"min_over_time(({GPU_MISSING})[10m:1m]) > 0"
# The lifecycle report's [docs/design.md#incidents] guard: a hardware Xid and a GPU loss on the same
# node (Hostname -> node).
SEED_RULE = (
    "max by (node) (label_replace(DCGM_FI_DEV_XID_ERRORS > 0 != 13 != 31 != 43 != 45 != 68"
    ' != 109, "node", "$1", "Hostname", "(.*)"))'
    ' and on (node) (max by (node) (kube_node_status_capacity{resource="nvidia_com_gpu"})'
    ' - max by (node) (kube_node_status_allocatable{resource="nvidia_com_gpu"}) > 0)'
)

# The lifecycle report's guard verbatim: hardware Xid, GPU loss held through 10 min, not yet
# cordoned.
SEED_GUARD = """
(max by (node) (label_replace(DCGM_FI_DEV_XID_ERRORS > 0 != 13 != 31 != 43 != 45 != 68 != 109,
    "node", "$1", "Hostname", "(.*)")))
and on (node) (min_over_time((
      max by (node) (kube_node_status_capacity{resource="nvidia_com_gpu"})
    - max by (node) (kube_node_status_allocatable{resource="nvidia_com_gpu"}))[10m:1m]) > 0)
and on (node) (max by (node) (kube_node_spec_unschedulable) == 0)
"""


class World:
    """Nodes, a store and a fixed simulated clock: all metrics_server needs."""

    def __init__(self, nodes: list[state.SimNode], objects: store.ObjectStore, now: datetime):
        self.nodes = nodes
        self.store = objects
        self.clock = self
        self.t = now

    def now(self) -> datetime:
        return self.t


def make_node(name: str, gpus: int = 2) -> state.SimNode:
    node = state.SimNode(name, f"boot-{name}", "580.95.05", "580.95.05")
    node.gpus = [
        state.SimGpu(i, state.new_uuid(f"{name}/{i}"), f"0000:{0x18 + 0x10 * i:02x}:00.0",
                     "NVIDIA H100 80GB HBM3")
        for i in range(gpus)
    ]  # fmt: skip
    return node


def make_store(nodes: list[state.SimNode]) -> store.ObjectStore:
    objects = store.ObjectStore()
    for node in nodes:
        gpus = {"nvidia.com/gpu": str(node.gpu_capacity)}
        objects.create("Node", "", {
            "metadata": {"name": node.name},
            "spec": {},
            "status": {"capacity": dict(gpus), "allocatable": dict(gpus),
                       "conditions": [{"type": "Ready", "status": "True"}]},
        })  # fmt: skip
    return objects


def inject_xid79(node: state.SimNode, objects: store.ObjectStore, at: datetime) -> None:
    """Xid 79 on GPU 1: it falls off the bus (its telemetry goes, its Xid series stays at 79)
    and the device plugin withdraws it from allocatable."""
    gpu = node.gpu(1)
    gpu.xid_history.append((at, 79))
    gpu.xid_last, gpu.offered, gpu.on_bus = 79, False, False
    patch = {"status": {"allocatable": {"nvidia.com/gpu": str(node.gpu_allocatable)}}}
    objects.merge_patch("Node", "", node.name, patch)


def test_live_scrape_sees_the_injected_fault(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    nodes = [make_node("gpu-node-1"), make_node("gpu-node-2")]
    objects = make_store(nodes)
    inject_xid79(nodes[1], objects, now)
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}}
    with metrics_server.serve(World(nodes, objects, now)) as srv:
        config |= metrics_server.scrape_config(srv.url, nodes)
        with prometheus.running(config, tmp_path / "data") as prom:
            prom.wait_for_targets(prometheus.target_count(config))
            (xid,) = prom.wait_until(f"{mn.DCGM_XID_LAST} == 79")
            loss = prom.wait_until(GPU_LOSS)
            seed = prom.wait_until(SEED_RULE)
            # Over a few seconds, so one scrape that a loaded machine let time out (a stale
            # marker for every series of that target) does not read as a target down.
            up = prom.wait_until('max_over_time(up{job="dcgm-exporter"}[10s]) == 1', series=2)
            telemetry = prom.wait_until(
                f"count by (Hostname) (last_over_time({mn.DCGM_GPU_UTIL}[10s]))", series=2
            )
    assert xid["metric"]["Hostname"] == "gpu-node-2"
    assert xid["metric"]["UUID"] == nodes[1].gpu(1).uuid
    assert xid["metric"]["err_msg"] == "GPU has fallen off the bus"
    assert xid["metric"]["instance"] == "gpu-node-2:9400"
    assert [(r["metric"]["node"], r["value"][1]) for r in loss] == [("gpu-node-2", "1")]
    assert [r["metric"]["node"] for r in seed] == ["gpu-node-2"]
    assert sorted(r["metric"]["instance"] for r in up) == ["gpu-node-1:9400", "gpu-node-2:9400"]
    gpus_reporting = {r["metric"]["Hostname"]: r["value"][1] for r in telemetry}
    assert gpus_reporting == {"gpu-node-1": "2", "gpu-node-2": "1"}  # the lost GPU is silent


def record_history(start: datetime, fault: datetime, end: datetime) -> history.HistoryRecorder:
    nodes = [make_node("gpu-node-1"), make_node("gpu-node-2")]
    objects = make_store(nodes)
    recorder = history.HistoryRecorder()
    now = start
    while now < end:
        if now == fault:
            inject_xid79(nodes[1], objects, now)
        recorder.sample(nodes, objects, now)
        now += STEP
    return recorder


def test_backfilled_history_answers_in_the_simulated_past(tmp_path: Path) -> None:
    real_now = datetime.now(UTC).replace(microsecond=0)
    start = real_now - timedelta(days=3) - timedelta(seconds=real_now.timestamp() % 15)
    fault = start + timedelta(hours=2)
    recorder = record_history(start, fault, start + timedelta(hours=3))
    openmetrics = tmp_path / "history.om"
    assert recorder.write_openmetrics(openmetrics) > 0
    with prometheus.from_openmetrics(openmetrics, tmp_path) as prom:
        before = prom.query(f"{mn.DCGM_XID_LAST} == 79", at=fault - timedelta(minutes=5))
        after = prom.query(f"{mn.DCGM_XID_LAST} == 79", at=fault + timedelta(minutes=5))
        day_later = prom.query(
            f"{mn.DCGM_XID_LAST} offset 24h == 79", at=fault + timedelta(hours=24, minutes=5)
        )
        held = prom.query(GPU_LOSS_HELD, at=fault + timedelta(minutes=15))
        not_yet_held = prom.query(GPU_LOSS_HELD, at=fault + timedelta(minutes=5))
        up = prom.query("sum(up)", at=fault)
    assert before == []
    assert [r["metric"]["Hostname"] for r in after] == ["gpu-node-2"]
    assert after[0]["metric"]["job"] == "dcgm-exporter"
    assert [r["metric"]["Hostname"] for r in day_later] == ["gpu-node-2"]
    assert [r["metric"]["node"] for r in held] == ["gpu-node-2"]
    assert not_yet_held == []
    assert up[0]["value"][1] == "3"


def test_a_missing_prometheus_skips_locally_and_fails_in_ci(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tools.shutil, "which", lambda _name: None)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must have it"):
        tools.require("prometheus")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception):
        tools.require("prometheus")


def test_seed_004_rule_fires_on_the_xid79_scenario_after_the_hold_window(tmp_path: Path) -> None:
    """The shipped Xid 79 scenario, played by the world and backfilled: the seed's guard rule
    (hardware Xid AND GPU loss held 10 min AND not cordoned) fires on gpu-node-b only."""
    origin, openmetrics = prometheus.played_two_days_ago(
        "xid79-twice", tmp_path / "xid79.om", step=STEP, until=timedelta(minutes=40)
    )
    fault = origin + timedelta(minutes=3, seconds=59)
    with prometheus.from_openmetrics(openmetrics, tmp_path) as prom:
        early = prom.query(SEED_GUARD, at=fault + timedelta(minutes=5))
        held = prom.query(SEED_GUARD, at=fault + timedelta(minutes=12))
        xid = prom.query(f"{mn.DCGM_XID_LAST}", at=fault + timedelta(minutes=12))
    assert early == []
    assert [r["metric"]["node"] for r in held] == ["gpu-node-b"]
    assert [(r["metric"]["gpu"], r["value"][1]) for r in xid] == [("4", "79")]


class WallWorld(World):
    """The world on the wall clock: the served counters grow while Prometheus scrapes them."""

    def now(self) -> datetime:
        return datetime.now(UTC)


def test_the_fleet_health_plan_finds_throttling_nvlink_and_ib_flaps_on_the_served_exporters(
    tmp_path: Path,
) -> None:
    now = datetime.now(UTC)
    nodes = [make_node("gpu-node-1"), make_node("gpu-node-2")]
    nodes[0].gpu(0).clock_events.append((now - timedelta(hours=1), now + timedelta(hours=1), 0x40))
    nodes[1].gpu(1).nvlink_errors.append(
        (now - timedelta(hours=1), now + timedelta(hours=1), 6000.0, "crc_flit"))
    plan = dataclasses.replace(fleet_health.HealthQueryPlan.for_settings(FLEET),
                               window=timedelta(seconds=30), long_window=timedelta(minutes=1),
                               step=timedelta(seconds=1))  # fmt: skip
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}}
    with metrics_server.serve(WallWorld(nodes, make_store(nodes), now)) as srv:
        config |= metrics_server.scrape_config(srv.url, nodes)
        with prometheus.running(config, tmp_path / "data") as prom:
            prom.wait_for_targets(5)  # 2 dcgm-exporters, 2 node-exporters, kube-state-metrics
            for later in (1, 2):  # two flaps after Prometheus has seen the port up
                nodes[1].ib_link_downs.append((datetime.now(UTC) + timedelta(seconds=later),
                                               "mlx5_1/1"))  # fmt: skip
            reader = sources_prometheus.PrometheusSource(prom.url, plan)
            deadline, found, samples = time.monotonic() + prometheus.WAIT_S, [], ()
            while time.monotonic() < deadline and len(found) < 3:
                time.sleep(1)  # polls until found, bounded: never to prove an absence
                samples = reader.samples(datetime.now(UTC))
                found = interconnect.detect(samples, FLEET)
            reader.close()
    # The guard's plan asks only for what can make a finding: the healthy GPUs and port are not
    # answered, and the coverage counts say every kind was collected.
    assert interconnect.unchecked(samples) == []
    assert {(interconnect.node_of(s.labels), s.labels.get("gpu")) for s in samples
            if s.name.endswith(mn.SHORT)} == {("gpu-node-1", "0"), ("gpu-node-2", "1"),
                                              ("gpu-node-2", None)}  # fmt: skip
    assert {(f.kind, f.node, f.gpu) for f in found} == {
        ("gpu-throttled", "gpu-node-1", "0"),
        ("nvlink-errors", "gpu-node-2", "1"),
        ("ib-link-flapping", "gpu-node-2", None),
    }
