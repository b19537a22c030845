"""The agent's ``nvidia-smi topo -m`` probe (docs/fleet-health.md#topology): rarely, with a
timeout, never on a hung driver, and the last good matrix exported for the guard to read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from prometheus_client.samples import Sample

from gpuguard.agent import daemon, journal
from gpuguard.agent import topology as probe_module
from gpuguard.model import fleet
from gpuguard.model import metric_names as mn
from gpuguard.policy import topology
from gpuguard.sim import kernel_lines
from tests.unit.hosttree import FakeRunner

T0 = datetime(2026, 9, 1, tzinfo=UTC)
MATRIX = (Path(__file__).resolve().parents[1] / "data" / "topology" / "a100x2-nv12-nics.txt")


def probe(runner: FakeRunner) -> probe_module.TopologyProbe:
    return probe_module.TopologyProbe("gpu-node-1", runner)


def test_reads_once_per_interval_with_a_timeout() -> None:
    runner = FakeRunner(stdout=MATRIX.read_text())
    p = probe(runner)
    assert p.run(T0) is not None
    p.run(T0 + timedelta(hours=1))
    assert [argv for argv, _ in runner.calls] == [("nvidia-smi", "topo", "-m")]
    assert runner.calls[0][1] == probe_module.TIMEOUT_S
    p.run(T0 + probe_module.EVERY)
    assert len(runner.calls) == 2


def test_never_runs_on_a_hung_driver_and_keeps_the_last_matrix() -> None:
    runner = FakeRunner(stdout=MATRIX.read_text())
    p = probe(runner)
    first = p.run(T0)
    later = T0 + probe_module.EVERY
    assert p.run(later, ["Xid 79 on 0000:99:00.0 (kernel log line 12)"]) is first
    assert len(runner.calls) == 1
    assert not p.read_ok
    assert "driver may be hung" in p.why_not


def test_a_timeout_or_garbage_is_not_read_and_says_why() -> None:
    p = probe(FakeRunner(returncode=None))
    assert p.run(T0) is None
    assert "timed out" in p.why_not
    p = probe(FakeRunner(stdout="Failed to initialize NVML: Unknown Error\n"))
    assert p.run(T0) is None
    assert "no GPU0 header" in p.why_not


def samples_of(p: probe_module.TopologyProbe) -> list[fleet.MetricSample]:
    found: list[Sample] = [s for family in p.families() for s in family.samples]
    return [fleet.MetricSample(s.name, s.labels, s.value, T0) for s in found]


def test_exported_series_fold_back_into_the_same_topology() -> None:
    p = probe(FakeRunner(stdout=MATRIX.read_text()))
    read = p.run(T0)
    samples = samples_of(p)
    assert {s.name for s in samples} == {mn.GPU_TOPOLOGY_READ, mn.GPU_NVLINK_PEER,
                                         mn.GPU_NUMA_NODE}  # fmt: skip
    assert topology.from_samples(samples) == {"gpu-node-1": read}


def test_no_matrix_exports_read_zero_and_no_links() -> None:
    p = probe(FakeRunner(returncode=127))
    p.run(T0)
    samples = samples_of(p)
    assert [(s.name, s.value) for s in samples] == [(mn.GPU_TOPOLOGY_READ, 0.0)]


def test_the_agent_reads_topology_in_its_check_cycle_and_stops_after_a_bus_loss(
    tmp_path: Path,
) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    runner = FakeRunner(stdout=MATRIX.read_text())
    probe_ = probe_module.TopologyProbe("gpu-node-1", runner, every=timedelta(0))
    config = daemon.AgentConfig("gpu-node-1", tmp_path / "host", tmp_path / "state")
    agent = daemon.Agent(config, lambda start: journal.FileFollower(log, start), list,
                         topology=probe_)  # fmt: skip
    agent.check_once()
    link = {"node": "gpu-node-1", "gpu": "0", "peer": "1", "link": "NV12"}
    assert agent.registry.get_sample_value(mn.GPU_NVLINK_PEER, link) == 1.0
    with log.open("a") as f:
        f.write(kernel_lines.xid("0000:99:00.0", 79) + "\n")
    agent.follow_once()
    agent.check_once()
    assert len(runner.calls) == 1  # not run on a driver that lost a GPU
    assert agent.registry.get_sample_value(mn.GPU_TOPOLOGY_READ, {"node": "gpu-node-1"}) == 0.0
    assert agent.registry.get_sample_value(mn.GPU_NVLINK_PEER, link) == 1.0  # the last good one
    agent.follower.close()
