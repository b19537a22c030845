"""Data is printed as text by the commands that print what the cluster and the simulator hold:
``ledger list``, ``explain``, ``sim run`` and ``demo``, in every format. A GPU on PCI bus
``ab`` (Rich's emoji code ``:ab:``), a person's hold note with Rich markup and a scenario named
with both come out exactly as they went in (the one-command cases: tests/unit/
test_cli_plain_text.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpuguard.cli.main import app
from gpuguard.demo import live_prometheus
from gpuguard.model import annotation_keys, settings
from gpuguard.sim import live, scenario

pytestmark = pytest.mark.integration

PCI = "0000:ab:00.0"  # GPU 5 of a simulated node (sim.world.PCI_BUSES)
NAME = "bus-ab :ab: [/evil]"
NOTE = "[bold]waiting for RMA[/bold] :cd: [/evil]"
EMOJI = ("🆎", "💿")
FORMATS = ("table", "json", "yaml")
SCENARIO = f"""
name: "{NAME}"
description: GPU 5 (PCI bus ab) of gpu-node-b logs Xid 13 from a process named [/evil], then
  falls off the bus.
duration: 4m
fleet:
  nodes: [gpu-node-a, gpu-node-b]
events:
  - {{at: 1m, xid: {{node: gpu-node-b, gpu: 5, xid: 13, pid: 4242, process: "[/evil]"}}}}
  - {{at: 2m, xid: {{node: gpu-node-b, gpu: 5, xid: 79}}}}
  - {{at: 2m, gpu_lost: {{node: gpu-node-b, gpu: 5}}}}
expect:
  isolate: [gpu-node-b]
"""


def gpuguard(*args: str, code: int = 0) -> str:
    result = CliRunner(env={"COLUMNS": "250"}).invoke(app, list(args))
    assert result.exit_code == code, result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


def printed_exactly(out: str, *texts: str) -> None:
    for text in texts:
        assert text in out, text
    for emoji in EMOJI:
        assert emoji not in out


def parsed(out: str, fmt: str) -> str:
    """The output's data as JSON text (table: the text itself)."""
    if fmt == "table":
        return out
    return json.dumps(json.loads(out) if fmt == "json" else yaml.safe_load(out),
                      ensure_ascii=False)


@pytest.fixture(scope="module")
def scenario_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("plain") / "bus-ab.yaml"
    path.write_text(SCENARIO)
    return path


@pytest.fixture(scope="module")
def isolated(scenario_file: Path, tmp_path_factory: pytest.TempPathFactory,
             ) -> Iterator[live.LiveCluster]:
    """The scenario served live, gpu-node-b isolated by ``gpuguard once`` and held by a person
    with a note."""
    spec = scenario.load(scenario_file)
    speed = 600.0
    emulation = live_prometheus.answers_for(settings.GuardSettings(), speed)
    with live.serve(spec, tmp_path_factory.mktemp("serve"), speed=speed, emulation=emulation,
                    prefer_emulation=True) as cluster:
        deadline = time.monotonic() + 30
        while cluster.world.elapsed < timedelta(minutes=3) and time.monotonic() < deadline:
            cluster.catch_up()
        gpuguard("once", *flags(cluster))
        hold = {"metadata": {"annotations": {annotation_keys.HOLD: NOTE}}}
        cluster.world.store.merge_patch("Node", "", "gpu-node-b", hold)
        yield cluster


def flags(cluster: live.LiveCluster) -> list[str]:
    return ["--kubeconfig", str(cluster.kubeconfig), "--prometheus-url", str(cluster.prometheus)]


@pytest.mark.parametrize("fmt", FORMATS)
def test_ledger_list_prints_the_pci_address_exactly(isolated: live.LiveCluster, fmt: str) -> None:
    out = gpuguard("ledger", "list", "--kubeconfig", str(isolated.kubeconfig), "-o", fmt)
    printed_exactly(parsed(out, fmt), PCI)


@pytest.mark.parametrize("fmt", FORMATS)
def test_explain_prints_the_pci_address_and_a_persons_note_exactly(
    isolated: live.LiveCluster, fmt: str
) -> None:
    marks = isolated.world.store.get("Node", "", "gpu-node-b")["metadata"]["annotations"]
    pci_mark = marks[annotation_keys.GPU_PCI]  # as the source wrote it (dcgm: 00000000:AB:..)
    assert pci_mark.lower().endswith(PCI)
    out = gpuguard("explain", "gpu-node-b", *flags(isolated), "-o", fmt)
    printed_exactly(parsed(out, fmt), pci_mark, NOTE)


@pytest.mark.parametrize("fmt", FORMATS)
def test_sim_run_prints_the_scenario_name_and_pci_address_exactly(
    scenario_file: Path, fmt: str
) -> None:
    out = gpuguard("sim", "run", str(scenario_file), "-o", fmt)
    printed_exactly(parsed(out, fmt), PCI, NAME)


@pytest.mark.parametrize("fmt", FORMATS)
def test_demo_prints_the_scenario_name_and_pci_address_exactly(
    scenario_file: Path, fmt: str
) -> None:
    out = gpuguard("demo", "--scenario", str(scenario_file), "-v", "-o", fmt)
    printed_exactly(parsed(out, fmt), PCI, NAME)
