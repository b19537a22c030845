"""The node agent over simulated host trees, scraped by a real Prometheus.

The lifecycle report's [docs/design.md#incidents] two agent-side stories, end to end: an Xid 79 in a
node's kernel log becomes ``gpuguard_xid_total{xid="79"}`` (and survives an agent restart without
double counting, so ``increase()`` stays right), and the May 21 unattended-upgrades incident — NVML
library replaced under the running module while the node stays Ready — shows as
``gpuguard_check_status{check="nvidia-match",status="FAIL"} == 1`` within one check interval.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from gpuguard import metrics_http
from gpuguard.agent import commands, daemon, exporter, journal
from gpuguard.agent.checks import result, rke2_release, running, settings
from gpuguard.cli import gate as gate_cli
from gpuguard.model import annotation_keys
from gpuguard.model import metric_names as names
from gpuguard.sim import clock, kernel_lines, kube_objects, scenario, state, store
from gpuguard.sim import hosts as hosts_module
from gpuguard.sim import world as simworld
from tests.conftest import SimApi
from tests.integration import prometheus

pytestmark = pytest.mark.integration

CHECK_INTERVAL_S = 2.0
SCRAPE = "1s"
SPEC = """\
name: agent-e2e
fleet: {nodes: [gpu-node-a, gpu-node-b]}
events:
  - {at: 10m, xid: {node: gpu-node-b, gpu: 4, xid: 79}}
  - {at: 30m, driver_upgrade: {node: gpu-node-a, version: "580.159.03"}}
"""


@contextmanager
def agent_running(
    node: str, hosts: Path, state_dir: Path, port: int, control_plane: str | None = None
) -> Iterator[daemon.Agent]:
    """One node's agent (file follower, checks every CHECK_INTERVAL_S) serving on ``port``."""
    root = hosts / node
    config = daemon.AgentConfig(
        node, root, state_dir / node, CHECK_INTERVAL_S, poll_interval_s=0.2
    )
    version = rke2_release.parse(control_plane) if control_plane else None
    checks = settings.CheckSettings(control_plane_version=version, check_timeout_s=5.0)

    def run_checks() -> list[result.CheckResult]:
        return running.run_checks(root, checks, commands.SubprocessRunner())

    kern_log = root / "var/log/kern.log"
    agent = daemon.Agent(config, lambda start: journal.FileFollower(kern_log, start), run_checks)
    stop = threading.Event()
    with metrics_http.serve(agent.exposition, agent.healthy, "127.0.0.1", port):
        loop = threading.Thread(target=agent.run, args=(stop,), name=f"agent-{node}")
        loop.start()
        try:
            yield agent
        finally:
            stop.set()
            loop.join(timeout=30)


def scrape_config(ports: dict[str, int]) -> dict[str, object]:
    return {
        "global": {"scrape_interval": SCRAPE, "evaluation_interval": SCRAPE},
        "scrape_configs": [{
            "job_name": "gpuguard-agent",
            "static_configs": [{"targets": [f"127.0.0.1:{p}" for p in ports.values()]}],
        }],
    }


def value(prom: prometheus.Prometheus, promql: str) -> float:
    result = prom.wait_until(promql)
    return float(result[0]["value"][1])


def next_cycle(
    agent: daemon.Agent, previous: exporter.CheckCycle | None, timeout_s: float = 30.0
) -> exporter.CheckCycle:
    """The agent's first check cycle to finish after ``previous`` (waits for it)."""
    deadline = time.monotonic() + timeout_s
    while (cycle := agent.collector.cycle) is previous or cycle is None:
        assert time.monotonic() < deadline, f"no check cycle within {timeout_s}s"
        time.sleep(0.05)
    return cycle


def status_of(cycle: exporter.CheckCycle, check: str) -> str:
    (found,) = [r.status.value for r in cycle.results if r.check == check]
    return found


def test_xid_counter_survives_restart_and_nvml_mismatch_shows_while_ready(tmp_path: Path) -> None:
    spec = scenario.loads(SPEC)
    hosts = tmp_path / "hosts"
    world = simworld.World.from_scenario(
        spec, store.ObjectStore(), clock.SimClock(spec.start), hosts_root=hosts
    )
    ports = {name: prometheus.free_port() for name in ("gpu-node-a", "gpu-node-b")}
    state_dir = tmp_path / "state"
    with ExitStack() as stack:
        prom = stack.enter_context(prometheus.running(scrape_config(ports), tmp_path / "prom"))
        node_a = stack.enter_context(
            agent_running("gpu-node-a", hosts, state_dir, ports["gpu-node-a"])
        )
        with agent_running("gpu-node-b", hosts, state_dir, ports["gpu-node-b"]):
            world.step_to(timedelta(minutes=15))  # Xid 79 on gpu-node-b GPU 4
            first = prom.wait_until('gpuguard_xid_total{node="gpu-node-b",xid="79"} == 1')
            assert first[0]["metric"]["pci"] == "0000:99:00.0"
            assert first[0]["metric"]["uuid"].startswith("GPU-")
            assert value(prom, 'gpuguard_gpu_fallen_off_bus_total{node="gpu-node-b"}') == 1

        # Killed and restarted on the same state dir; the driver repeats the Xid once.
        with agent_running("gpu-node-b", hosts, state_dir, ports["gpu-node-b"]) as restarted:
            node_b = world.node("gpu-node-b")
            gpu = node_b.gpu(4)
            line = kernel_lines.stamp([kernel_lines.xid(gpu.pci, 79)], node_b.name, world.now,
                                      timedelta(days=12))
            with (hosts / "gpu-node-b/var/log/kern.log").open("a") as log:
                log.write(line[0] + "\n")
            prom.wait_until('gpuguard_xid_total{node="gpu-node-b",xid="79"} == 2')
            assert restarted.tally.lines > 0
            scrapes = 'count_over_time(gpuguard_xid_total{node="gpu-node-b",xid="79"}[1h])'
            seen = value(prom, scrapes)
            prom.wait_until(f"{scrapes} >= {seen + 3}")  # three more scrapes: still not 3
            peak = 'max_over_time(gpuguard_xid_total{node="gpu-node-b",xid="79"}[1m])'
            assert value(prom, peak) == 2
            assert value(prom, 'resets(gpuguard_xid_total{node="gpu-node-b"}[1m])') == 0

        # The lifecycle report, May 21: unattended-upgrades swaps NVML under the running module.
        nvidia = 'gpuguard_check_status{node="gpu-node-a",check="nvidia-match",status="%s"} == 1'
        prom.wait_until(nvidia % "PASS")
        world.step_to(timedelta(minutes=35))
        # The first cycle to start after the upgrade is at the latest the second to finish.
        running_then = next_cycle(node_a, node_a.collector.cycle)
        first_after = next_cycle(node_a, running_then)
        assert status_of(first_after, "nvidia-match") == "FAIL"
        prom.wait_until(nvidia % "FAIL")
        assert world.node("gpu-node-a").ready  # the node still reports Ready
        assert value(prom, 'gpuguard_nvml_mismatch{node="gpu-node-a"}') == 1


# ---- the onboarding gate over the simulator's API and the agent's metrics ------------------

RKE2 = "v1.34.3+rke2r1"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
ONBOARDING = {"key": annotation_keys.ONBOARDING_TAINT, "value": "pending", "effect": "NoSchedule"}


def sim_node(name: str) -> state.SimNode:
    gpus = [
        state.SimGpu(index=i, uuid=state.new_uuid(f"{name}/{i}"), model="NVIDIA H100 80GB HBM3",
                     pci=f"0000:{0x18 + i:02x}:00.0")
        for i in range(2)
    ]
    return state.SimNode(name=name, boot_id=f"boot-{name}", driver_module="580.126.09",
                         driver_library="580.126.09", gpus=gpus, kubelet_version=RKE2)


def node_object(name: str, index: int, *, control_plane: bool = False,
                taints: tuple[dict[str, str], ...] = ()) -> dict[str, object]:
    node, now = sim_node(name), datetime.now(UTC)
    obj = kube_objects.node_object(node, now, index)
    obj["status"] = {**obj["status"], **kube_objects.node_status(node, now, now)}
    if control_plane:
        labels = obj["metadata"]["labels"]
        del labels["node-role.kubernetes.io/worker"]
        labels["node-role.kubernetes.io/control-plane"] = "true"
    obj["spec"] = {**obj["spec"], "taints": list(taints)}
    return obj


def burnin_job(node: str, succeeded: int) -> dict[str, object]:
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": f"burnin-{node}", "namespace": "gpuguard",
                     "labels": {annotation_keys.BURNIN_NODE_LABEL: node},
                     "creationTimestamp": "2026-11-29T09:00:00Z"},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
                                       "containers": [{"name": "burnin", "image": "gpuguard"}]}}},
        "status": {"succeeded": succeeded},
    }


def run_gate(api: SimApi, prom: prometheus.Prometheus, node: str) -> tuple[int, dict[str, Any]]:
    app = typer.Typer()
    app.command()(gate_cli.gate)
    outcome = CliRunner().invoke(app, [node, "--kube-server", api.url,
                                       "--prometheus-url", prom.url, "-o", "json"])
    return outcome.exit_code, json.loads(outcome.stdout) if outcome.stdout.strip() else {}


def gate_events(api: SimApi) -> list[str]:
    return [e["reason"] for e in api.store.list("Event", "default")]


def test_gate_keeps_the_taint_until_burnin_passed_then_removes_only_its_own(
    tmp_path: Path, sim_api: SimApi
) -> None:
    new = "gpu-node-new"
    sim_api.store.create("Node", "", node_object("cp-1", 0, control_plane=True))
    sim_api.store.create("Node", "", node_object("gpu-node-a", 1))
    sim_api.store.create("Node", "", node_object(new, 2, taints=(GPU_TAINT, ONBOARDING)))
    hosts = tmp_path / "hosts"
    tree = hosts_module.write_host_tree(sim_node(new), hosts)
    (tree / "var/lib/rancher/rke2/data/v1.34.3-rke2r1-0a1b2c3d").mkdir(parents=True)
    port = prometheus.free_port()
    with (
        prometheus.running(scrape_config({new: port}), tmp_path / "prom") as prom,
        agent_running(new, hosts, tmp_path / "state", port, control_plane=RKE2),
    ):
        prom.wait_until(f'{names.CHECK_STATUS}{{node="{new}",check="rke2-version",status="PASS"}}'
                        " == 1")
        code, report = run_gate(sim_api, prom, new)
        assert code == 2  # smoke UNKNOWN: no burn-in yet
        steps = {s["step"]: s["status"] for s in report["steps"]}
        assert steps == {"kubelet-version": "PASS", "role-labels": "PASS",
                         "conformance": "PASS", "smoke": "UNKNOWN"}
        assert report["api_server"] == {"version": RKE2, "source": "API server /version"}
        stored = sim_api.store.get("Node", "", new)
        assert ONBOARDING in stored["spec"]["taints"]
        assert json.loads(stored["metadata"]["annotations"][annotation_keys.GATE_REPORT])[
            "passed"] is False

        sim_api.store.create("Job", "gpuguard", burnin_job(new, succeeded=1))
        code, report = run_gate(sim_api, prom, new)
    assert code == 0
    assert report["passed"] is True
    assert sim_api.store.get("Node", "", new)["spec"]["taints"] == [GPU_TAINT]
    assert gate_events(sim_api) == ["OnboardingGateBlocked", "OnboardingGatePassed"]


def test_gate_on_an_unknown_node_exits_2_naming_it(tmp_path: Path, sim_api: SimApi) -> None:
    app = typer.Typer()
    app.command()(gate_cli.gate)
    outcome = CliRunner().invoke(app, ["gpu-node-nope", "--kube-server", sim_api.url])
    assert outcome.exit_code == 2
    assert "'gpu-node-nope' not found" in outcome.output
