"""Isolation to return, end to end in the simulator: Xid 79 on gpu-node-b, the guard isolates
it (over real HTTP to the simulator's API), records the verdict, waits through the power
cycle, runs the burn-in Job on the new boot and returns the node — uncordoned, gpuguard's
annotations gone — while gpu-node-a is never touched."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import lightkube
import pytest
from typer.testing import CliRunner

from gpuguard.actuators import jobs, ledger, nodes
from gpuguard.catalog import xid as xid_catalog
from gpuguard.cli.main import app
from gpuguard.controller import recovery, return_to_pool, tick
from gpuguard.demo import job_commands
from gpuguard.model import annotation_keys as keys
from gpuguard.model import return_to_pool as model
from gpuguard.model import settings as settings_model
from gpuguard.sim import (
    clock,
    kubeapi,
    kubelet,
    prometheus_view,
    return_view,
    scenario,
    state,
    store,
    world,
)
from gpuguard.sources import kubernetes
from tests.builders import burnin_summary
from tests.integration import livesim as e2e

pytestmark = pytest.mark.integration
STEP = timedelta(seconds=15)
TICK = timedelta(seconds=30)
POWER_CYCLE_AT = timedelta(minutes=40)
HEALTHY_TFLOPS = 740.0  # an H100's dense FP16, as the burn-in's floor expects


def xid79_then_power_cycle() -> scenario.Scenario:
    return scenario.from_mapping(
        {
            "name": "xid79-return",
            "start": "2026-09-21T05:50:00Z",
            "duration": "70m",
            "fleet": {"nodes": ["gpu-node-a", "gpu-node-b"], "gpus_per_node": 8,
                      "model": "NVIDIA H100 80GB HBM3", "driver": "580.126.09"},
            "events": [
                {"at": "3m30s", "xid": {"node": "gpu-node-b", "gpu": 4, "xid": 79}},
                {"at": "3m30s", "gpu_lost": {"node": "gpu-node-b", "gpu": 4}},
                {"at": "40m", "power_cycle": {"node": "gpu-node-b"}},
            ],
        },
        source="test",
    )  # fmt: skip


def job_runner(played: world.World, hosts: Path) -> kubelet.RunCommand:
    """The evidence Job runs the real collector; the burn-in Job the real burn-in evaluation
    over the node's GPUs as enumerated now (a GPU still off the bus is missing)."""
    evidence = job_commands.runner(played, hosts)

    def run(node: state.SimNode, argv: list[str]) -> tuple[int, str]:
        if argv[:2] == ["gpuguard", "burnin"]:
            return burnin_summary(argv, [HEALTHY_TFLOPS for g in node.gpus if g.on_bus])
        return evidence(node, argv)

    return run


@dataclass
class Played:
    """When the guard isolated and returned gpu-node-b, and each change of its return step."""

    isolated_at: datetime | None = None
    returned_at: datetime | None = None
    steps: list[tuple[datetime, model.ReturnStep]] = field(default_factory=list)


def test_xid79_node_is_isolated_then_returned_after_the_power_cycle(tmp_path: Path) -> None:
    spec = xid79_then_power_cycle()
    sim_clock = clock.SimClock(spec.start)
    objects = store.ObjectStore(now=sim_clock.now)
    played = world.World.from_scenario(spec, objects, sim_clock, hosts_root=tmp_path)
    guard_settings = settings_model.GuardSettings()
    isolation = guard_settings.isolation
    view = prometheus_view.WorldPrometheus(played, isolation.hold_window, isolation.xid_lookback)
    job_kubelet = kubelet.JobKubelet(played, job_runner(played, tmp_path))
    seen = Played()
    with (
        kubeapi.serve(objects) as server,
        lightkube.Client(
            config=kubeapi.lightkube_config(server.url), field_manager="gpuguard"
        ) as client,
    ):
        guard = build_guard(client, played, view, guard_settings)
        offset = timedelta(0)
        while offset < spec.end and seen.returned_at is None:
            offset += STEP
            played.step_to(offset)
            view.scrape()
            job_kubelet.step()
            if offset % TICK == timedelta(0):
                observe(guard.tick(), seen)
    assert seen.isolated_at is not None, "gpu-node-b was never isolated"
    assert seen.returned_at is not None, f"gpu-node-b never returned: {seen.steps}"
    power_cycled = spec.start + POWER_CYCLE_AT
    back_after = seen.returned_at - power_cycled
    print(f"isolated {seen.isolated_at - spec.start} after start; returned {back_after} after "
          "the power cycle")  # fmt: skip
    assert timedelta(0) < back_after < timedelta(minutes=15)
    node_b = objects.get("Node", "", "gpu-node-b")
    assert node_b["spec"].get("unschedulable") is not True
    marks = node_b["metadata"].get("annotations") or {}
    assert not [k for k in marks if keys.is_gpuguard_key(k)]
    assert objects.get("Node", "", "gpu-node-a")["spec"].get("unschedulable") is not True
    label = keys.BURNIN_NODE_LABEL
    (burnin,) = [j for j in objects.list("Job", "gpuguard")
                  if j["metadata"]["labels"].get(label) == "gpu-node-b"]  # fmt: skip
    assert burnin["metadata"]["annotations"][keys.BOOT_ID] == played.node("gpu-node-b").boot_id
    reasons = [e["reason"] for e in objects.list("Event", "default")
               if e["involvedObject"]["name"] == "gpu-node-b"]  # fmt: skip
    assert reasons[-1] == "BurnInPassed"
    held_until_power_cycle, *returning = seen.steps
    assert held_until_power_cycle[1] is model.ReturnStep.HOLD
    assert held_until_power_cycle[0] < power_cycled
    # right after the boot the new exporter has not been scraped yet: its GPUs are unknown
    # for a tick (policy.freshness), which waits, never returns
    assert [step for _, step in returning if step is not model.ReturnStep.WAIT] == [
        model.ReturnStep.START_BURN_IN,
        model.ReturnStep.BURN_IN_RUNNING,
        model.ReturnStep.UNCORDON,
    ]
    assert all(at > power_cycled for at, _ in returning)


def build_guard(
    client: lightkube.Client,
    played: world.World,
    view: prometheus_view.WorldPrometheus,
    guard_settings: settings_model.GuardSettings,
) -> tick.Guard:
    writer = nodes.NodeWriter(client)
    catalog = xid_catalog.load_catalog()
    namespace, image = guard_settings.controller.namespace, guard_settings.controller.image
    return tick.Guard(
        metrics=view,
        cluster=kubernetes.KubernetesReader(client),
        writer=writer,
        classifier=catalog,
        settings=guard_settings,
        clock=played.clock,
        recovery=recovery.Recovery(
            jobs=jobs.Jobs(client, namespace), ledger=ledger.Ledger(client, namespace),
            writer=writer, catalog=catalog, image=image, namespace=namespace,
        ),
        return_to_pool=return_to_pool.ReturnToPool(
            jobs=jobs.Jobs(client, namespace), ledger=ledger.Ledger(client, namespace),
            writer=writer, facts=return_view.WorldReturnFacts(played), classifier=catalog,
            settings=guard_settings, image=image, namespace=namespace,
        ),
    )  # fmt: skip


def observe(result: tick.TickResult, seen: Played) -> None:
    assert result.ok, result.error
    if any(a.node == "gpu-node-b" for a in result.applied):
        seen.isolated_at = result.at
    for outcome in result.returns:
        assert outcome.decision.node == "gpu-node-b"
        if not seen.steps or seen.steps[-1][1] is not outcome.decision.step:
            seen.steps.append((result.at, outcome.decision.step))
        if outcome.returned:
            seen.returned_at = result.at


def test_explain_shows_the_return_checklist_of_an_isolated_node(tmp_path: Path) -> None:
    runner = CliRunner()
    with e2e.live_sim(tmp_path) as sim:
        xid = e2e.wait_for(lambda: bool(sim.prom.query("DCGM_FI_DEV_XID_ERRORS == 79")), sim, 30)
        flags = ["--kube-server", sim.api.url, "--prometheus-url", sim.prom.url]
        isolated = runner.invoke(app, ["once", *flags])
        explained = runner.invoke(app, ["explain", "gpu-node-b", *flags, "-o", "json"])
        table = runner.invoke(app, ["explain", "gpu-node-b", *flags])
        serving = runner.invoke(app, ["explain", "gpu-node-a", *flags, "-o", "json"])
    assert xid
    assert isolated.exit_code == 0, isolated.output
    assert explained.exit_code == 0, explained.output
    checklist = json.loads(explained.stdout)["return_checklist"]
    statuses = {c["condition"]: c["status"] for c in checklist["checks"]}
    assert list(statuses) == [str(c) for c in model.ReturnCondition]
    assert (checklist["step"], checklist["blocking"]) == ("hold", "rebooted-or-reset")
    assert statuses["no-hardware-xid"] == "FAIL"  # the Xid 79 of this boot, read by the plan
    assert statuses["no-hold"] == "PASS"
    assert "rebooted-or-reset" in table.stdout
    assert json.loads(serving.stdout)["return_checklist"] is None
