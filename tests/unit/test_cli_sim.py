"""``gpuguard sim`` and ``gpuguard demo`` as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest
from typer.testing import CliRunner

from gpuguard.cli import main, sim_serve
from gpuguard.model import settings
from gpuguard.sim import live

runner = CliRunner()


def test_sim_run_shipped_scenario_as_json() -> None:
    result = runner.invoke(main.app, ["sim", "run", "xid79-twice", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["name"] == "xid79-twice"
    assert data["nodes"] == ["gpu-node-a", "gpu-node-b"]
    first_xid = next(e for e in data["timeline"] if e["kind"] == "xid")
    assert first_xid == {"t": 239.0, "kind": "xid", "node": "gpu-node-b",
                         "detail": first_xid["detail"]}
    assert "Xid 79" in first_xid["detail"]
    end_b = next(n for n in data["final"] if n["node"] == "gpu-node-b")
    assert (end_b["gpu_capacity"], end_b["gpu_allocatable"], end_b["ready"]) == (8, 8, True)


def test_sim_run_prints_a_timeline_table_with_human_offsets() -> None:
    result = runner.invoke(main.app, ["sim", "run", "xid79-twice"])
    assert result.exit_code == 0, result.output
    assert "3m59s" in result.stdout
    assert "4d20h10m" in result.stdout
    assert "power_cycle" in result.stdout


def test_sim_run_writes_host_trees(tmp_path: Path) -> None:
    result = runner.invoke(main.app, ["sim", "run", "xid79-twice", "--json", "--hosts",
                                      str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "gpu-node-b/sys/module/nvidia/version").read_text() == "580.126.09\n"


def test_sim_list_shows_shipped_scenarios() -> None:
    result = runner.invoke(main.app, ["sim", "list", "--json"])
    assert result.exit_code == 0, result.output
    names = {row["name"] for row in json.loads(result.stdout)}
    assert {"xid79-twice", "phantom-14-of-32"} <= names
    assert "xid79-twice" in runner.invoke(main.app, ["sim", "list"]).stdout


def test_a_bad_scenario_file_exits_2_naming_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: t\nfleet: {nodes: [a]}\nevents:\n  - {at: 1m, explode: {node: 0}}\n")
    result = runner.invoke(main.app, ["sim", "run", str(path)])
    assert result.exit_code == 2
    assert f"{path}: events[0].explode: unknown event kind" in result.stderr


def test_an_unknown_scenario_name_exits_2() -> None:
    result = runner.invoke(main.app, ["sim", "run", "no-such-scenario"])
    assert result.exit_code == 2
    assert "no such file or shipped scenario" in result.stderr


@pytest.mark.usefixtures("demo_played_once")
def test_demo_runs_given_scenarios_and_prints_figures() -> None:
    result = runner.invoke(main.app, ["demo", "--scenario", "mig-reconfig",
                                      "--scenario", "user-xid-storm"])
    assert result.exit_code == 0, result.output
    assert "figures" in result.stdout
    assert "mig-reconfig" in result.stdout
    assert "user-xid-storm" in result.stdout


def served(kind: str, speed: float) -> live.LiveCluster:
    """What ``run_command`` reads of a live cluster (no world needed for it)."""
    return live.LiveCluster(
        world=cast(Any, None), kubernetes="http://127.0.0.1:1", metrics=cast(Any, None),
        prometheus="http://127.0.0.1:2", kubeconfig=Path("/tmp/kc"), speed=speed, started=0.0,
        prometheus_kind=kind,
    )


def test_sim_serve_prints_gpuguard_run_on_the_wall_clock_with_a_scaled_hold_window() -> None:
    guard = settings.GuardSettings()
    command = sim_serve.run_command(served(live.REAL, 60), guard, None)
    assert command == (
        "GPUGUARD_CONTROLLER__INTERVAL=1s GPUGUARD_ISOLATION__HOLD_WINDOW=1m gpuguard run "
        "--kubeconfig /tmp/kc --prometheus-url http://127.0.0.1:2"
    )
    slow = sim_serve.run_command(served(live.REAL, 2), guard, Path("my.yaml"))
    assert slow.startswith("GPUGUARD_CONTROLLER__INTERVAL=1s GPUGUARD_ISOLATION__HOLD_WINDOW=5m ")
    assert "--config my.yaml" in slow
    # the simulator's own answers are in scenario time: the hold window stays as it was given
    assert "HOLD_WINDOW" not in sim_serve.run_command(served(live.SIMULATED, 60), guard, None)
