"""Phantom and utilization through a real Prometheus: the simulator's exporters recorded over
40 simulated minutes, backfilled with promtool, read by ``sources.gpu_metrics`` and by the
``gpuguard phantom`` / ``gpuguard utilization`` commands at a past instant (``--at``), with
DCGM profiling metrics collected and not."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuguard.catalog import gpu_models
from gpuguard.cli.main import app
from gpuguard.model import settings as settings_model
from gpuguard.policy import phantom, utilization
from gpuguard.sim import clock, history, scenario, store, world
from gpuguard.sources import gpu_metrics
from tests.integration import prometheus

pytestmark = pytest.mark.integration

SETTINGS = settings_model.GuardSettings()
STEP = timedelta(seconds=15)
# The two commands as cli/main.py registers them (the lead adds them there).
SCENARIO = """
name: phantom-beside-busy-gpus
start: "{start}"
duration: 40m
fleet: {{nodes: [gpu-node-1, gpu-node-2], gpus_per_node: 4, model: NVIDIA H100 80GB HBM3}}
events:
  - {{at: 0s, phantom: {{node: gpu-node-1, gpu: 1}}}}
  - {{at: 0s, workload: {{node: gpu-node-1, gpus: [2], profile: small_compute, name: tiny}}}}
  - {{at: 0s, workload: {{node: gpu-node-1, gpus: [3], profile: training, name: train}}}}
"""


def backfilled(tmp_path: Path, *, profiling: bool) -> tuple[Path, datetime]:
    """The scenario recorded two days ago as OpenMetrics; returns (file, origin)."""
    real_now = datetime.now(UTC).replace(microsecond=0)
    origin = real_now - timedelta(days=2) - timedelta(seconds=real_now.timestamp() % 15)
    spec = scenario.loads(SCENARIO.format(start=origin.isoformat().replace("+00:00", "Z")))
    played = world.World.from_scenario(spec, store.ObjectStore(), clock.SimClock(origin))
    for node in played.nodes:
        node.profiling_metrics = profiling
    recorder = history.HistoryRecorder()

    def record(w: world.World) -> None:
        recorder.sample(w.nodes, w.store, w.clock.now())

    played.run(step=STEP, on_step=record)
    path = tmp_path / "phantom.om"
    recorder.write_openmetrics(path)
    return path, origin


@pytest.mark.parametrize(
    ("profiling", "busy_class"),
    [(True, "healthy-busy"), (False, "profiling-metrics-missing")],
    ids=["profiling-metrics", "no-profiling-metrics"],
)
def test_phantom_and_diagnosis_over_real_prometheus(
    tmp_path: Path, profiling: bool, busy_class: str
) -> None:
    openmetrics, origin = backfilled(tmp_path, profiling=profiling)
    at = origin + timedelta(minutes=35)
    plan = gpu_metrics.GpuQueryPlan(window=SETTINGS.phantom.hold)
    with prometheus.from_openmetrics(openmetrics, tmp_path) as prom:
        with gpu_metrics.GpuMetricsSource(prom.url, plan) as source:
            windows = source.windows(at)
            too_early = source.windows(origin + timedelta(minutes=10))
        guards = gpu_metrics.GpuQueryPlan.for_settings(SETTINGS.phantom)
        with gpu_metrics.GpuMetricsSource(prom.url, guards) as source:
            scoped = source.windows(at)
        cli = CliRunner()
        stamp = at.isoformat()
        shown = cli.invoke(
            app, ["phantom", "--prometheus-url", prom.url, "--at", stamp, "-o", "json"]
        )
        used = cli.invoke(
            app, ["utilization", "--prometheus-url", prom.url, "--at", stamp, "--since", "30m",
                  "-o", "json"],
        )  # fmt: skip
        table = cli.invoke(app, ["phantom", "--prometheus-url", prom.url, "--at", stamp])
    models = gpu_models.load_table()
    found = phantom.decide(windows, SETTINGS.phantom, models, at).phantoms
    assert [(p.node, p.gpu) for p in found] == [("gpu-node-1", "1")]
    assert 50 <= found[0].wasted_w <= 90  # H100: ~140 W phantom vs ~70 W idle
    assert found[0].profiled is profiling
    assert found[0].hours >= 0.5  # the signature held since the start, 35 min before
    assert phantom.decide(too_early, SETTINGS.phantom, models, at).phantoms == ()
    # The guard's plan asks every GPU of gpu-node-1 (its GPU 1 busy without a pod), none of
    # gpu-node-2 (idle), and decides the same.
    assert scoped == tuple(w for w in windows if w.node == "gpu-node-1")
    assert {w.node for w in windows} == {"gpu-node-1", "gpu-node-2"}
    assert phantom.decide(scoped, SETTINGS.phantom, models, at) == phantom.decide(
        windows, SETTINGS.phantom, models, at
    )

    diagnosed = {d.gpu: str(d.reason) for d in utilization.diagnose(
        windows, SETTINGS.utilization, SETTINGS.phantom.hold)}  # fmt: skip
    assert diagnosed == {
        "2": "low-occupancy" if profiling else "profiling-metrics-missing",
        "3": busy_class,
    }

    assert shown.exit_code == 0, shown.output
    report = json.loads(shown.output)
    assert [(p["node"], p["gpu"]) for p in report["phantoms"]] == [("gpu-node-1", "1")]
    commands = [c["command"] for c in report["phantoms"][0]["commands"]]
    assert "nvidia-smi -q -d PIDS -i 1" in commands
    assert used.exit_code == 0, used.output
    assert {g["gpu"]: g["class"] for g in json.loads(used.output)["gpus"]}["3"] == busy_class
    assert table.exit_code == 0, table.output
    assert "gpu-node-1" in table.output
    assert "nvidia-persistenced" in table.output


def test_bad_flags_exit_2_and_an_unreachable_prometheus_exits_1() -> None:
    cli = CliRunner()
    bad = cli.invoke(app, ["phantom", "--since", "soon", "--prometheus-url", "http://127.0.0.1:9"])
    assert bad.exit_code == 2
    assert "--since" in bad.output
    down = cli.invoke(app, ["utilization", "--prometheus-url", "http://127.0.0.1:9"])
    assert down.exit_code == 1
