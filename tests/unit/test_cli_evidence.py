"""``gpuguard evidence`` on a host tree the simulator wrote after an Xid 79: verdict, JSON,
the termination-message summary, bad flags (the command is mounted on a bare Typer app until
main.py registers it)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gpuguard.cli import evidence
from gpuguard.model import evidence as evidence_model
from gpuguard.sim import clock, scenario, store, world
from tests.unit import hosttree

app = typer.Typer()
app.command("evidence")(evidence.evidence)
app.command("help")(lambda: None)  # a second command keeps "evidence" a subcommand

DEAD_GPU = "0000:99:00.0"
SCENARIO = """\
name: xid79-evidence
fleet: {nodes: [gpu-node-a, gpu-node-b]}
events:
  - {at: 10m, xid: {node: gpu-node-b, gpu: 4, xid: 79}}
"""


def gpuguard(*args: str) -> tuple[int, str, str]:
    outcome = CliRunner(env={"COLUMNS": "160"}).invoke(app, ["evidence", *args])
    return outcome.exit_code, outcome.stdout, outcome.stderr


@pytest.fixture(scope="module")
def after_xid79(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The simulator's host trees 10 minutes after gpu-node-b's GPU 4 fell off the bus."""
    root = tmp_path_factory.mktemp("hosts")
    spec = scenario.loads(SCENARIO)
    played = world.World.from_scenario(spec, store.ObjectStore(), clock.SimClock(spec.start),
                                       hosts_root=root)
    played.step_to(timedelta(minutes=20))
    return root


def test_report_names_the_power_cycle_and_its_rule(after_xid79: Path) -> None:
    tree = hosttree.HostTree(after_xid79 / "gpu-node-b")
    before = tree.snapshot()
    code, out, _ = gpuguard("--root", str(tree.root))
    assert code == 0
    assert "verdict: power-cycle" in out
    assert "config-space-all-ff" in out
    assert DEAD_GPU in out
    assert tree.snapshot() == before


def test_json_is_the_whole_bundle(after_xid79: Path) -> None:
    code, out, _ = gpuguard("--root", str(after_xid79 / "gpu-node-b"), "--json")
    bundle = evidence_model.EvidenceBundle.from_json(out)
    assert code == 0
    assert bundle.node == "gpu-node-b"
    assert bundle.verdict is not None
    assert bundle.verdict.verdict == "power-cycle"
    assert {g.pci: g.config_all_ff for g in bundle.gpus}[DEAD_GPU] is True
    assert bundle.nvidia_smi is not None
    assert not bundle.nvidia_smi.ran


def test_healthy_node_still_exits_0_with_human_diagnosis(after_xid79: Path) -> None:
    code, out, _ = gpuguard("--root", str(after_xid79 / "gpu-node-a"), "--summary")
    assert code == 0
    summary = evidence_model.EvidenceSummary.from_json(out)
    assert summary.verdict == "human-diagnosis"
    assert summary.rule == "no-fault-evidence"


def test_summary_is_the_termination_message(after_xid79: Path, tmp_path: Path) -> None:
    message = tmp_path / "termination-log"
    code, out, _ = gpuguard("--root", str(after_xid79 / "gpu-node-b"), "--summary",
                            "--summary-file", str(message), "--node", "gpu-node-b.cluster")
    assert code == 0
    assert message.read_text() == out.strip()
    assert len(message.read_bytes()) <= evidence_model.SUMMARY_MAX_BYTES
    summary = evidence_model.EvidenceSummary.from_json(message.read_text())
    assert summary.node == "gpu-node-b.cluster"
    assert summary.verdict == "power-cycle"
    assert summary.config_all_ff[DEAD_GPU] is True
    assert summary.xid_counts == {"79": 1, "fallen_off_bus": 1}
    assert summary.aer_fatal["0000:98:01.0"] == 1


@pytest.mark.parametrize(("args", "complaint"), [
    pytest.param(["--since", "yesterday"], "--since", id="since-not-a-duration"),
    pytest.param(["--since", "0s"], "--since", id="since-empty-window"),
    pytest.param(["--json", "--summary"], "--summary", id="json-and-summary"),
    pytest.param(["--kernel-log", "/nonexistent/kern.log"], "--kernel-log", id="missing-log"),
])
def test_bad_flags_exit_2_naming_the_flag(after_xid79: Path, args: list[str],
                                          complaint: str) -> None:
    code, _, err = gpuguard("--root", str(after_xid79 / "gpu-node-b"), *args)
    assert code == 2
    assert complaint in err


def test_missing_root_exits_2() -> None:
    code, _, err = gpuguard("--root", "/nonexistent/host")
    assert code == 2
    assert "--root" in err


def test_since_accepts_boot_in_any_case_and_durations() -> None:
    assert evidence.parse_since("boot") is None
    assert evidence.parse_since("BOOT") is None
    assert evidence.parse_since("24h") == timedelta(hours=24)


def test_help_teaches_with_examples() -> None:
    outcome = CliRunner(env={"COLUMNS": "160"}).invoke(app, ["evidence", "--help"])
    assert outcome.exit_code == 0
    assert "gpuguard evidence --root /host" in outcome.stdout
    assert "power-cycle" in outcome.stdout


def test_after_the_power_cycle_the_new_boot_has_nothing_to_repair(tmp_path: Path) -> None:
    spec = scenario.loads(SCENARIO + "  - {at: 1h, power_cycle: {node: gpu-node-b}}\n")
    played = world.World.from_scenario(spec, store.ObjectStore(), clock.SimClock(spec.start),
                                       hosts_root=tmp_path)
    played.step_to(timedelta(hours=2))
    code, out, _ = gpuguard("--root", str(tmp_path / "gpu-node-b"), "--summary")
    summary = evidence_model.EvidenceSummary.from_json(out)
    assert code == 0
    assert summary.xid_counts == {}, "the Xid 79 belongs to the previous boot"
    assert summary.config_all_ff[DEAD_GPU] is False
    assert summary.verdict == "human-diagnosis"
