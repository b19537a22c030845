"""The evidence collector on host trees: what it reads, refuses to run, and never writes.

Trees are written by the simulator (``sim.hosts``: real sysfs topology with relative links, root
port AER files, kern.log) and then bent by hand where a test needs a broken host.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpuguard.agent.evidence import collect, hostcmd, kernel, smi
from gpuguard.catalog import xid as xid_catalog
from gpuguard.model import decisions, evidence, ports
from gpuguard.sim import hosts, kernel_lines, state
from tests.unit import hosttree

CATALOG = xid_catalog.load_catalog()
NOW = datetime(2026, 9, 21, 14, 0, tzinfo=UTC)
BOOTED = NOW - timedelta(hours=5)
GOOD, BAD = "0000:18:00.0", "0000:99:00.0"
S = decisions.CheckStatus
V = decisions.Verdict
DATA = Path(__file__).parent.parent / "data/evidence"
SMI_REMAP_PENDING = """
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 4
        Pending                           : Yes
        Remapping Failure Occurred        : No
"""


def sim_node() -> state.SimNode:
    gpus = [state.SimGpu(index=i, uuid=state.new_uuid(f"n/{i}"), pci=pci,
                         model="NVIDIA GeForce RTX 5090") for i, pci in enumerate((GOOD, BAD))]
    node = state.SimNode(name="gpu-node-b", boot_id="3f6c0d1e-aaaa-bbbb-cccc-000000000001",
                         driver_module="580.126.09", driver_library="580.126.09", gpus=gpus)
    node.kernel_log = kernel_lines.stamp([kernel_lines.boot_banner(node.kernel_release)],
                                         node.name, BOOTED, timedelta(0))
    return node


def log_kernel(node: state.SimNode, lines: list[str]) -> None:
    node.kernel_log += kernel_lines.stamp(lines, node.name, NOW - timedelta(minutes=5),
                                          timedelta(hours=5))


def fall_off(node: state.SimNode) -> None:
    """Xid 79 on the BAD GPU, as the world does it: off the bus, fall-off message logged."""
    node.gpus[1].on_bus = False
    log_kernel(node, [kernel_lines.gpu_at(BAD, node.gpus[1].uuid), kernel_lines.xid(BAD, 79),
                      *kernel_lines.fallen_off_bus(BAD, 0x2B85)])


def write(node: state.SimNode, tmp_path: Path) -> hosttree.HostTree:
    return hosttree.HostTree(hosts.write_host_tree(node, tmp_path))


def run(tree: hosttree.HostTree, runner: ports.CommandRunner | None = None,
        kernel_log: kernel.KernelLogOptions | None = None,
        nvidia_smi: smi.SmiOptions | None = None) -> evidence.EvidenceBundle:
    """Collect, and prove that nothing under the root changed."""
    options = collect.CollectOptions(kernel_log=kernel_log or kernel.KernelLogOptions(),
                                     nvidia_smi=nvidia_smi or smi.SmiOptions())
    before = tree.snapshot()
    bundle = collect.collect(tree.root, options, runner or ScriptedRunner({}), CATALOG, NOW)
    assert tree.snapshot() == before, "evidence collection wrote under the root"
    return bundle


def items(bundle: evidence.EvidenceBundle, name: str) -> dict[str | None, evidence.EvidenceItem]:
    return {item.gpu: item for item in bundle.items if item.item == name}


def test_healthy_node_passes_everything_it_can_read(tmp_path: Path) -> None:
    runner = ScriptedRunner({})
    bundle = run(write(sim_node(), tmp_path), runner)
    assert (bundle.node, bundle.boot_id) == ("gpu-node-b", "3f6c0d1e-aaaa-bbbb-cccc-000000000001")
    statuses = {(item.item, item.gpu): item.status for item in bundle.items}
    assert statuses.pop(("nvidia-smi", None)) is S.UNKNOWN  # no NVIDIA runtime: no nvidia-smi
    assert set(statuses.values()) == {S.PASS}, statuses
    assert [(g.pci, g.config_all_ff, g.link_width, g.root_port) for g in bundle.gpus] == [
        (GOOD, False, 16, "0000:17:01.0"), (BAD, False, 16, "0000:98:01.0")]
    assert [port.fatal for port in bundle.root_ports] == [0, 0]
    assert bundle.verdict is not None
    assert bundle.verdict.verdict is V.HUMAN_DIAGNOSIS
    assert bundle.verdict.rule is evidence.VerdictRule.NO_FAULT_EVIDENCE
    assert [argv[0] for argv in runner.calls] == ["journalctl", "nvidia-smi"]


def test_xid79_with_config_ff_and_aer_fatal_is_a_power_cycle_without_nvidia_smi(
        tmp_path: Path) -> None:
    node = sim_node()
    fall_off(node)
    tree = write(node, tmp_path)
    runner = ScriptedRunner({"nvidia-smi": (0, "must not be asked")})
    bundle = run(tree, runner)
    assert items(bundle, "pci-config")[BAD].status is S.FAIL
    assert "all 256 bytes read 0xff" in items(bundle, "pci-config")[BAD].evidence
    assert items(bundle, "pci-config")[GOOD].status is S.PASS
    aer = items(bundle, "root-port-aer")
    assert aer[BAD].status is S.FAIL
    assert "aer_dev_fatal:SDES=1" in aer[BAD].evidence
    assert aer[GOOD].status is S.PASS
    assert items(bundle, "hardware-xid")[None].status is S.FAIL
    assert [(e.xid, e.kind) for e in bundle.xid_events] == [
        (79, "xid"), (None, "fallen_off_bus")]
    assert "nvidia-smi" not in [argv[0] for argv in runner.calls], "nvidia-smi on a hung driver"
    assert bundle.nvidia_smi is not None
    assert not bundle.nvidia_smi.ran
    assert "config space reads all ff" in bundle.nvidia_smi.reason
    assert bundle.verdict is not None
    assert bundle.verdict.verdict is V.POWER_CYCLE


def test_malformed_aer_and_unreadable_config_space_are_unknown(tmp_path: Path) -> None:
    tree = write(sim_node(), tmp_path)
    port = "sys/devices/pci0000:17/0000:17:01.0"
    tree.write(f"{port}/aer_dev_fatal", "Undefined 0\nSDES lots\nTOTAL_ERR_FATAL 0\n")
    config = tree.root / "sys/devices/pci0000:98/0000:98:01.0" / BAD / "config"
    config.unlink()
    config.mkdir()  # reading a directory fails even as root
    bundle = run(tree)
    aer = items(bundle, "root-port-aer")[GOOD]
    assert aer.status is S.UNKNOWN
    assert "aer_dev_fatal line 2" in aer.evidence
    pci_config = items(bundle, "pci-config")[BAD]
    assert pci_config.status is S.UNKNOWN
    assert "not a regular file" in pci_config.evidence
    facts = {g.pci: g for g in bundle.gpus}
    assert facts[BAD].config_all_ff is None
    assert bundle.root_ports[0].fatal is None


def test_a_fifo_where_config_space_should_be_does_not_hang(tmp_path: Path) -> None:
    tree = write(sim_node(), tmp_path)
    config = tree.root / "sys/devices/pci0000:17/0000:17:01.0" / GOOD / "config"
    config.unlink()
    os.mkfifo(config)
    assert items(run(tree), "pci-config")[GOOD].status is S.UNKNOWN


@pytest.mark.parametrize(("returncode", "stdout", "status"), [
    pytest.param(0, SMI_REMAP_PENDING, S.FAIL, id="remap-pending"),
    pytest.param(0, SMI_REMAP_PENDING.replace("Yes", "No"), S.PASS, id="answers-clean"),
    pytest.param(None, "", S.UNKNOWN, id="timed-out"),
    pytest.param(9, "", S.UNKNOWN, id="failed"),
])
def test_nvidia_smi_runs_with_a_hard_timeout_when_the_driver_looks_alive(
        tmp_path: Path, returncode: int | None, stdout: str, status: S) -> None:
    tree = write(sim_node(), tmp_path)
    runner = ScriptedRunner({"nvidia-smi": (returncode, stdout)})
    bundle = run(tree, runner)
    assert runner.calls[-1] == ("nvidia-smi", "-q", "-d", "ECC,ROW_REMAPPER")
    assert runner.timeouts[-1] == smi.TIMEOUT_S
    assert items(bundle, "nvidia-smi")[None].status is status


def test_no_nvidia_smi_flag_is_respected_and_recorded(tmp_path: Path) -> None:
    tree = write(sim_node(), tmp_path)
    runner = ScriptedRunner({"nvidia-smi": (0, "")})
    bundle = run(tree, runner, nvidia_smi=smi.SmiOptions(enabled=False))
    assert "nvidia-smi" not in [argv[0] for argv in runner.calls]
    assert "--no-nvidia-smi" in items(bundle, "nvidia-smi")[None].evidence


def test_gpu_named_in_the_log_but_gone_from_sysfs_is_reported(tmp_path: Path) -> None:
    node = sim_node()
    fall_off(node)
    tree = write(node, tmp_path)
    tree.remove(f"sys/bus/pci/devices/{BAD}")
    bundle = run(tree)
    assert items(bundle, "gpu-present")[BAD].status is S.FAIL
    gone = {g.pci: g for g in bundle.gpus}[BAD]
    assert (gone.present, gone.uuid) == (False, node.gpus[1].uuid)
    assert bundle.verdict is not None
    assert bundle.verdict.rule is evidence.VerdictRule.FELL_OFF_BUS


def test_the_0921_log_read_for_the_current_boot_only(tmp_path: Path) -> None:
    node = sim_node()
    node.gpus[1].on_bus = False
    bundle = run(write(node, tmp_path),
                 kernel_log=kernel.KernelLogOptions(path=DATA / "kern-0921.log"))
    assert [(e.xid, e.pci) for e in bundle.xid_events] == [
        (79, BAD), (154, BAD), (None, BAD)], "the previous boot's Xid 48 is left out"
    assert bundle.verdict is not None
    assert bundle.verdict.verdict is V.POWER_CYCLE
    assert bundle.verdict.driver_advice is not None
    assert "gpu-reset-required" in bundle.verdict.driver_advice


def test_a_window_reaches_into_the_previous_boot(tmp_path: Path) -> None:
    options = kernel.KernelLogOptions(path=DATA / "kern-0921.log", since=timedelta(days=14))
    bundle = run(write(sim_node(), tmp_path), kernel_log=options)
    assert [e.xid for e in bundle.xid_events] == [48, 79, 154, None]
    options = kernel.KernelLogOptions(path=DATA / "kern-0921.log", since=timedelta(hours=1))
    assert run(write(sim_node(), tmp_path), kernel_log=options).xid_events == ()


def test_journal_is_asked_first_for_the_current_boot(tmp_path: Path) -> None:
    tree = write(sim_node(), tmp_path)
    journal = ("2026-09-21T13:55:01+0000 gpu-node-b kernel: NVRM: Xid (PCI:0000:18:00): 48, "
               "pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE)\n")
    runner = ScriptedRunner({"journalctl": (0, journal)})
    bundle = run(tree, runner)
    assert runner.calls[0] == ("journalctl", "--root", str(tree.root), "-k", "-o", "short-iso",
                               "--no-pager", "-b"), "the image's journalctl on the host's files"
    assert runner.timeouts[0] == kernel.JOURNAL_TIMEOUT_S
    assert [(e.xid, e.pci, e.timestamp) for e in bundle.xid_events] == [
        (48, GOOD, datetime(2026, 9, 21, 13, 55, 1, tzinfo=UTC))]
    assert bundle.verdict is not None
    assert bundle.verdict.verdict is V.GPU_RESET


def test_journal_window_and_fallback_to_kern_log_when_it_fails(tmp_path: Path) -> None:
    node = sim_node()
    fall_off(node)
    tree = write(node, tmp_path)
    runner = hosttree.FakeRunner(returncode=1, stderr="No journal files were found.")
    bundle = run(tree, runner, kernel_log=kernel.KernelLogOptions(since=timedelta(hours=2)))
    assert runner.calls[0][0][-2:] == ("--since", "2026-09-21 12:00:00 UTC")
    assert bundle.kernel_log is not None
    assert bundle.kernel_log.source == "/var/log/kern.log"
    assert "No journal files were found." in items(bundle, "kernel-log")[None].evidence
    assert [e.xid for e in bundle.xid_events] == [79, None]


def test_no_kernel_log_at_all_is_unknown_not_clean(tmp_path: Path) -> None:
    tree = write(sim_node(), tmp_path)
    tree.remove("var/log/kern.log")
    bundle = run(tree)
    assert items(bundle, "kernel-log")[None].status is S.UNKNOWN
    assert items(bundle, "hardware-xid")[None].status is S.UNKNOWN
    assert bundle.kernel_log is None


def test_root_port_found_through_an_absolute_link_stays_inside_the_root(tmp_path: Path) -> None:
    tree = write(sim_node(), tmp_path)
    link = tree.root / "sys/bus/pci/devices" / GOOD
    link.unlink()
    link.symlink_to(f"/sys/devices/pci0000:17/0000:17:01.0/{GOOD}")  # would be the real host's
    bundle = run(tree)
    assert {g.pci: g.root_port for g in bundle.gpus}[GOOD] == "0000:17:01.0"
    assert items(bundle, "root-port-aer")[GOOD].status is S.PASS


def test_flat_sysfs_without_topology_leaves_aer_unknown(tmp_path: Path) -> None:
    tree = write(sim_node(), tmp_path)
    link = tree.root / "sys/bus/pci/devices" / GOOD
    real = link.resolve()
    link.unlink()
    shutil.copytree(real, link)
    bundle = run(tree)
    aer = items(bundle, "root-port-aer")[GOOD]
    assert aer.status is S.UNKNOWN
    assert "no root port" in aer.evidence
    assert items(bundle, "pci-config")[GOOD].status is S.PASS


def test_degraded_and_dead_links(tmp_path: Path) -> None:
    node = sim_node()
    node.gpus[0].link_width = 8
    node.gpus[1].on_bus = False
    bundle = run(write(node, tmp_path))
    link = items(bundle, "pcie-link")
    assert link[GOOD].status is S.FAIL
    assert link[BAD].status is S.UNKNOWN  # width 63, speed "Unknown": nothing to compare


def test_eight_gpus_and_10000_xid_lines_summarise_within_a_termination_message(
        tmp_path: Path) -> None:
    node = sim_node()
    node.gpus = [state.SimGpu(index=i, uuid=state.new_uuid(f"n/{i}"), pci=f"0000:{bus:02x}:00.0",
                              model="NVIDIA GeForce RTX 5090")
                 for i, bus in enumerate((0x18, 0x2A, 0x3A, 0x5D, 0x99, 0xAB, 0xBA, 0xDB))]
    node.gpus[4].on_bus = False
    codes = (13, 31, 43, 48, 63, 79, 94, 95, 119, 154)
    log_kernel(node, [kernel_lines.xid(node.gpus[n % 8].pci, codes[n % 10], pid=n)
                      for n in range(10_000)])
    bundle = run(write(node, tmp_path))
    text = bundle.summary().to_json()
    assert len(text.encode()) <= evidence.SUMMARY_MAX_BYTES
    summary = evidence.EvidenceSummary.from_json(text)
    assert sum(summary.xid_counts.values()) == 10_000
    assert summary.xid_counts["79"] == 1000
    assert summary.config_all_ff == {gpu.pci: not gpu.on_bus for gpu in node.gpus}
    assert summary.last_xid154_action is not None
    assert summary.verdict is V.POWER_CYCLE
    combinations = len({(n % 10, n % 8) for n in range(10_000)})  # (code, GPU) pairs logged
    assert len(bundle.xid_events) == combinations * kernel.KEEP_PER_KIND
    assert bundle.kernel_log is not None
    assert bundle.kernel_log.events_dropped == 10_000 - len(bundle.xid_events)
    assert "counted but not kept" in items(bundle, "kernel-log")[None].evidence


class ScriptedRunner:
    """Answers per program: ``{"journalctl": (returncode, stdout)}``; any other program is
    not in the container (127), as in a Job without the NVIDIA runtime."""

    def __init__(self, answers: dict[str, tuple[int | None, str]]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, ...]] = []
        self.timeouts: list[float] = []

    def run(self, argv: Sequence[str], *, timeout_s: float) -> ports.CommandResult:
        self.calls.append(tuple(argv))
        self.timeouts.append(timeout_s)
        returncode, stdout = self.answers.get(argv[0], (hostcmd.NOT_FOUND, ""))
        return ports.CommandResult(tuple(argv), returncode, stdout, "")


def test_ring_buffer_is_the_last_resort_and_the_window_applies_to_it(tmp_path: Path) -> None:
    tree = write(sim_node(), tmp_path)
    tree.remove("var/log/kern.log")
    dmesg = ("2026-09-21T09:00:00,000000+00:00 NVRM: Xid (PCI:0000:18:00): 48, pid='<unknown>', "
             "name=<unknown>, DBE\n"
             "2026-09-21T13:58:00,000000+00:00 NVRM: Xid (PCI:0000:18:00): 119, pid=7, "
             "name=python3, Timeout after 6s of waiting for RPC response from GPU0 GSP!\n")
    runner = ScriptedRunner({"journalctl": (None, ""), "dmesg": (0, dmesg)})
    bundle = run(tree, runner)
    assert runner.calls[:2] == [
        ("journalctl", "--root", str(tree.root), "-k", "-o", "short-iso", "--no-pager", "-b"),
        ("dmesg", "--time-format", "iso")]
    assert [e.xid for e in bundle.xid_events] == [48, 119]
    evidence_text = items(bundle, "kernel-log")[None].evidence
    assert "timed out" in evidence_text
    assert "cannot read kernel log /var/log/kern.log: No such file or directory" in evidence_text
    windowed = run(tree, ScriptedRunner({"journalctl": (1, ""), "dmesg": (0, dmesg)}),
                   kernel_log=kernel.KernelLogOptions(since=timedelta(hours=1)))
    assert [e.xid for e in windowed.xid_events] == [119]


def test_without_the_nvidia_runtime_nvidia_smi_is_unknown_and_says_why(tmp_path: Path) -> None:
    tree = write(sim_node(), tmp_path)
    tree.write("usr/bin/nvidia-smi").write("run/nvidia/driver/usr/bin/nvidia-smi")
    runner = ScriptedRunner({})
    bundle = run(tree, runner)
    assert all(argv[0] != "chroot" for argv in runner.calls), "never the host's binaries"
    smi_item = items(bundle, "nvidia-smi")[None]
    assert smi_item.status is S.UNKNOWN
    assert "not in the container" in smi_item.evidence


def test_a_device_whose_vendor_cannot_be_read_makes_the_scan_unknown(tmp_path: Path) -> None:
    tree = write(sim_node(), tmp_path)
    tree.mkdir("sys/bus/pci/devices/0000:00:1f.0")
    scan = items(run(tree), "pci-devices")[None]
    assert scan.status is S.UNKNOWN
    assert "/sys/bus/pci/devices/0000:00:1f.0/vendor: not found" in scan.evidence
    assert f"{GOOD}, {BAD}" in scan.evidence


def test_rhel_hosts_keep_kernel_lines_in_var_log_messages(tmp_path: Path) -> None:
    node = sim_node()
    fall_off(node)
    tree = write(node, tmp_path)
    kern_log = tree.root / "var/log/kern.log"
    kern_log.rename(tree.root / "var/log/messages")
    bundle = run(tree)
    assert bundle.kernel_log is not None
    assert bundle.kernel_log.source == "/var/log/messages"
    assert bundle.kernel_log.event_counts == {"79": 1, "fallen_off_bus": 1}


def test_an_xid_storm_never_buries_the_decisive_event(tmp_path: Path) -> None:
    node = sim_node()
    log_kernel(node, [kernel_lines.xid(GOOD, 95),
                      *(kernel_lines.xid(GOOD, 13, pid=n) for n in range(5_000))])
    bundle = run(write(node, tmp_path))
    assert [e.xid for e in bundle.xid_events].count(95) == 1
    assert bundle.verdict is not None
    assert bundle.verdict.rule is evidence.VerdictRule.RESET_CODE_HEALTHY_CONFIG
    assert bundle.summary().xid_counts == {"13": 5_000, "95": 1}
