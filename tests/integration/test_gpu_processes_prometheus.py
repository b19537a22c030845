"""The agent's ``gpuguard_gpu_processes`` through a real Prometheus: what the agent's collector
renders, recorded every check cycle over 20 minutes and backfilled, becomes the UUID ->
process count map ``sources.gpu_metrics`` hands to the phantom policy — the most processes
seen in the window, and nothing for a GPU an incomplete scan did not vouch for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpuguard.agent import exporter, gpu_processes
from gpuguard.model import metric_names as mn
from gpuguard.sources import gpu_metrics
from tests.integration import prometheus

pytestmark = pytest.mark.integration

NODE = "gpu-node-1"
CARDS = [gpu_processes.GpuCard(str(i), f"0000:1{i}:00.0", f"GPU-{i}") for i in range(3)]
CYCLE = timedelta(minutes=5)


def cycle(by_minor: dict[str, int], incomplete: str = "") -> gpu_processes.ProcessReport:
    return gpu_processes.report(gpu_processes.ProcessScan(by_minor, incomplete), CARDS)


# GPU 0: a trainer that ended 10 minutes ago; GPU 2: never held; GPU 1: held when the last
# scan ran out of budget — that scan vouches for GPU 1 only, no zeros for GPU 0 and 2.
CYCLES = [cycle({"0": 2}), cycle({"0": 1}), cycle({}), cycle({"1": 1}, "time budget spent")]


def openmetrics(path: Path, origin: datetime) -> None:
    collector = exporter.AgentCollector(NODE, exporter.Tally())
    lines: dict[str, list[str]] = {mn.GPU_PROCESSES: [], mn.DCGM_GPU_UTIL: []}
    for n, report in enumerate(CYCLES):
        collector.processes = report
        for t in range(0, int(CYCLE.total_seconds()), 30):
            stamp = (origin + n * CYCLE).timestamp() + t
            for s in (s for m in collector.collect() for s in m.samples):
                if s.name == mn.GPU_PROCESSES:
                    labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
                    lines[s.name].append(f"{s.name}{{{labels}}} {s.value} {stamp}")
            lines[mn.DCGM_GPU_UTIL].append(
                f'{mn.DCGM_GPU_UTIL}{{Hostname="{NODE}",UUID="GPU-0",gpu="0"}} 0 {stamp}'
            )
    body = "".join(
        f"# TYPE {name} gauge\n" + "\n".join(samples) + "\n" for name, samples in lines.items()
    )
    path.write_text(body + "# EOF\n")


def test_agent_process_counts_read_back_per_window(tmp_path: Path) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    origin = now - timedelta(days=1)
    path = tmp_path / "agent.om"
    openmetrics(path, origin)
    end = origin + len(CYCLES) * CYCLE - timedelta(seconds=30)
    with prometheus.from_openmetrics(path, tmp_path) as prom:
        seen = {
            minutes: _processes(prom.url, timedelta(minutes=minutes), end) for minutes in (4, 9, 20)
        }
    assert seen == {
        4: {"GPU-1": 1},  # only the incomplete scan: GPU 0 and 2 not vouched for
        9: {"GPU-0": 0, "GPU-1": 1, "GPU-2": 0},
        20: {"GPU-0": 2, "GPU-1": 1, "GPU-2": 0},  # the most seen in the window
    }


def _processes(url: str, window: timedelta, at: datetime) -> dict[str, int] | None:
    plan = gpu_metrics.GpuQueryPlan(window=window)
    with gpu_metrics.GpuMetricsSource(url, plan, staleness=timedelta(days=2)) as source:
        found = source.readings(at).processes
    return None if found is None else dict(found)
