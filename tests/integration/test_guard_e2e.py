"""The guard end to end: the simulated world served over real HTTP (Kubernetes API,
dcgm-exporter, kube-state-metrics), scraped by a real Prometheus, read by the real adapters.

A GPU falls off the bus (Xid 79) a few seconds in; the guard must cordon the node with its
annotations and an Event. Two `gpuguard run` replicas against one simulator: one acts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import httpx
import lightkube
import pytest
from typer.testing import CliRunner

from gpuguard.actuators import nodes as node_writer
from gpuguard.catalog import xid as xid_catalog
from gpuguard.cli.main import app
from gpuguard.controller import tick, wiring
from gpuguard.model import annotation_keys, settings
from gpuguard.sim import kubeapi
from gpuguard.sources import kubernetes, prometheus
from tests.conftest import SimApi
from tests.integration import prometheus as prom_helper
from tests.integration.livesim import FAULT_AFTER, LiveSim, live_sim, wait_for

pytestmark = pytest.mark.integration


def test_xid79_is_isolated_with_annotations_and_an_event(tmp_path: Path) -> None:
    guard_settings = settings.GuardSettings()
    plan = prometheus.QueryPlan(
        hold_window=guard_settings.isolation.hold_window,
        xid_lookback=guard_settings.isolation.xid_lookback,
    )
    with live_sim(tmp_path) as sim, lightkube.Client(
        config=kubeapi.lightkube_config(sim.api.url)
    ) as client:
        source = prometheus.PrometheusSource(sim.prom.url, plan)
        guard = tick.Guard(
            metrics=source,
            cluster=kubernetes.KubernetesReader(client),
            writer=node_writer.NodeWriter(client),
            classifier=xid_catalog.load_catalog(),
            settings=guard_settings,
            clock=wiring.SystemClock(),
        )
        fault_at = sim.world.origin + FAULT_AFTER
        isolated = wait_for(
            lambda: bool(sim.node("gpu-node-b")["spec"].get("unschedulable")),
            sim,
            timeout_s=40,
            step=guard.tick,
        )
        seen_at = datetime.now(UTC)
        source.close()
        node_b, node_a = sim.node("gpu-node-b"), sim.node("gpu-node-a")
        events = sim.world.store.list("Event", "default")
    assert isolated, "the guard never isolated gpu-node-b"
    marks = node_b["metadata"]["annotations"]
    assert marks[annotation_keys.REASON] == "xid-79"
    assert marks[annotation_keys.GPU_CAPACITY] == "8"
    assert marks[annotation_keys.BOOT_ID] == sim.world.node("gpu-node-b").boot_id
    isolated_at = datetime.fromisoformat(marks[annotation_keys.ISOLATED_AT].replace("Z", "+00:00"))
    # the isolation's own time, between the fault and the moment the test saw the cordon (the
    # wait bounds how late; a fixed bound on the wall clock would fail a loaded CI machine)
    assert fault_at <= isolated_at <= seen_at
    assert not node_a["spec"].get("unschedulable")
    assert [e["involvedObject"]["name"] for e in events] == ["gpu-node-b"]


def replica(sim: LiveSim, identity: str, port: int) -> subprocess.Popen[bytes]:
    """A ``gpuguard run`` replica ticking every second. The Lease keeps its default duration
    and renew deadline (15 s, 10 s): the test asserts that one replica acts, and a leader
    whose tick a loaded CI machine slows past a short lease would be taken over for real."""
    env = os.environ | {
        "GPUGUARD_CONTROLLER__INTERVAL": "1s",
        "GPUGUARD_CONTROLLER__RENEW_EVERY": "0.5s",
    }
    argv = [sys.executable, "-m", "gpuguard.cli.main", "run", "--kube-server", sim.api.url,
            "--prometheus-url", sim.prom.url, "--identity", identity,
            "--metrics-port", str(port), "--log-level", "WARNING"]
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def guard_metrics(port: int) -> dict[str, float] | None:
    """The replica's leader gauge and tick count; None while it does not serve yet."""
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.TransportError:
        return None
    wanted = ("gpuguard_leader ", "gpuguard_ticks_total ")
    return {
        line.split()[0]: float(line.split()[1])
        for line in text.splitlines()
        if line.startswith(wanted)
    }


def ticks(ports: list[int]) -> float:
    """Ticks so far, over every replica (only the leader ticks)."""
    return sum((guard_metrics(p) or {}).get("gpuguard_ticks_total", 0) for p in ports)


def test_two_replicas_one_acts(tmp_path: Path) -> None:
    with live_sim(tmp_path) as sim:
        ports = [prom_helper.free_port(), prom_helper.free_port()]
        procs = [replica(sim, f"replica-{i}", port) for i, port in enumerate(ports)]
        try:
            isolated = wait_for(
                lambda: bool(sim.node("gpu-node-b")["spec"].get("unschedulable")), sim, 45
            )
            serving = wait_for(lambda: None not in [guard_metrics(p) for p in ports], sim, 30)
            ticked = ticks(ports)
            more_ticks = wait_for(  # three more ticks in which a second replica could act
                lambda: ticks(ports) >= ticked + 3, sim, 30
            )
            seen = [guard_metrics(port) for port in ports]
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            logs = [proc.communicate(timeout=60)[1].decode(errors="replace") for proc in procs]
        patches = [
            r for r in sim.api.requests
            if r.method == "PATCH" and r.path == "/api/v1/nodes/gpu-node-b"
        ]
    assert isolated, f"no isolation; replica logs: {logs}"
    assert serving, f"a replica never served /metrics; replica logs: {logs}"
    assert more_ticks, f"no further ticks; replica logs: {logs}"
    assert sorted(m.get("gpuguard_leader") for m in seen) == [0, 1], seen
    (leader,) = [m for m in seen if m["gpuguard_leader"] == 1]
    (standby,) = [m for m in seen if m["gpuguard_leader"] == 0]
    assert leader["gpuguard_ticks_total"] > 0
    assert standby["gpuguard_ticks_total"] == 0
    cordons = [r for r in patches if (r.body or {}).get("spec", {}).get("unschedulable")]
    assert len(cordons) == 1  # the evidence Job's start mark is a second, annotation-only patch
    assert all(proc.returncode == 0 for proc in procs), logs


def test_once_dry_run_explain_and_status_tell_why_and_change_nothing(tmp_path: Path) -> None:
    runner = CliRunner()
    with live_sim(tmp_path) as sim:
        seen = wait_for(lambda: bool(sim.prom.query("DCGM_FI_DEV_XID_ERRORS == 79")), sim, 30)
        flags = ["--kube-server", sim.api.url, "--prometheus-url", sim.prom.url, "-o", "json"]
        once = runner.invoke(app, ["once", "--dry-run", *flags])
        explained = runner.invoke(app, ["explain", "gpu-node-b", *flags])
        status = runner.invoke(app, ["status", *flags])
        missing = runner.invoke(app, ["explain", "no-such-node", *flags])
        still_schedulable = not sim.node("gpu-node-b")["spec"].get("unschedulable")
    assert seen
    assert once.exit_code == 0, once.output
    (decision,) = [d for d in json.loads(once.stdout)["decisions"] if d["node"] == "gpu-node-b"]
    assert (decision["decision"], decision["reason"], decision["done"]) == (
        "isolate", "fast-path", "dry-run")
    assert any("DCGM_FI_DEV_XID_ERRORS" in e for e in decision["evidence"])
    assert still_schedulable
    why = json.loads(explained.stdout)
    assert why["state"] == "serving"
    assert why["gpus"] == "7/8 allocatable"
    assert [d["reason"] for d in why["decisions"]] == ["fast-path"]
    fleet_status = json.loads(status.stdout)
    assert fleet_status["nodes"] == {"serving": ["gpu-node-a", "gpu-node-b"]}
    assert fleet_status["can_decide"] is True
    assert fleet_status["pending_actions"] == ["gpu-node-b"]
    health = fleet_status["fleet_health"]  # a real Prometheus answered the fleet-health plan
    assert (health["findings"], health["persistent"]) == ([], [])
    assert not [why for why in health["not_checked"] if "refused" in why]
    assert missing.exit_code == 2


def test_once_fails_closed_when_prometheus_is_unreachable(sim_api: SimApi) -> None:
    result = CliRunner().invoke(
        app, ["once", "--kube-server", sim_api.url, "--prometheus-url", "http://127.0.0.1:1"]
    )
    assert result.exit_code == 1
    assert "fail closed" in result.output
