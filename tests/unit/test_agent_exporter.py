"""The agent's metrics: what an alert or the guard's fast path reads, with the right labels."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuguard.agent import exporter
from gpuguard.agent.checks import result
from gpuguard.catalog import xid as catalog_xid
from gpuguard.kernlog import parse
from gpuguard.model import decisions
from gpuguard.model import metric_names as names
from gpuguard.sim import kernel_lines

PCI = "0000:99:00.0"
UUID = "GPU-3d1e2f7a-1b2c-4d5e-8f90-123456789abc"


def collector(gpu_index: dict[str, str] | None = None) -> exporter.AgentCollector:
    return exporter.AgentCollector("gpu-node-b", exporter.Tally(gpu_index))


def value(c: exporter.AgentCollector, name: str, **labels: str) -> float | None:
    return exporter.registry_for(c).get_sample_value(name, {"node": "gpu-node-b", **labels})


def count(c: exporter.AgentCollector, lines: list[str]) -> None:
    c.tally.count(lines, parse.XidLogParser())


@pytest.mark.parametrize(
    ("gpu_index", "gpu"),
    [
        pytest.param({UUID: "4", PCI: "4"}, "4", id="index-from-driver-information-file"),
        pytest.param({}, "", id="no-mapping-empty-gpu-label"),
    ],
)
def test_xid79_counted_with_node_gpu_uuid_pci_xid_labels(
    gpu_index: dict[str, str], gpu: str
) -> None:
    c = collector(gpu_index)
    count(c, [kernel_lines.gpu_at(PCI, UUID), kernel_lines.xid(PCI, 79)])
    labels = {"gpu": gpu, "uuid": UUID, "pci": PCI, "xid": "79", "rule": ""}
    assert value(c, names.XID_TOTAL, **labels) == 1
    assert value(c, names.AGENT_KERNEL_LINES_TOTAL) == 2


def test_open_driver_fallen_off_bus_message_counts_once_per_message() -> None:
    c = collector()
    count(c, [kernel_lines.gpu_at(PCI, UUID), *kernel_lines.fallen_off_bus(PCI, 0x2330)])
    assert value(c, names.FALLEN_OFF_BUS_TOTAL, pci=PCI, uuid=UUID) == 1


def test_xid154_exports_only_the_last_recovery_action_per_gpu() -> None:
    c = collector()
    count(c, [
        kernel_lines.xid(PCI, 154, "GPU recovery action changed from 0x0 (None) to 0x1 "
                                   "(GPU Reset Required)"),
        kernel_lines.xid(PCI, 154, "GPU recovery action changed from 0x1 (GPU Reset Required) "
                                   "to 0x2 (Node Reboot Required)"),
    ])
    card = {"pci": PCI, "uuid": ""}
    assert value(c, names.XID154_RECOVERY_ACTION, **card, action="node-reboot-required") == 1
    assert value(c, names.XID154_RECOVERY_ACTION, **card, action="gpu-reset-required") is None
    card_154 = {"gpu": "", "uuid": "", "pci": PCI, "xid": "154"}
    assert value(c, names.XID_TOTAL, **card_154, rule="xid154:reset") == 1
    assert value(c, names.XID_TOTAL, **card_154, rule="xid154:reboot") == 1


def test_garbage_xid_lines_are_counted_as_malformed_and_lose_nothing_else() -> None:
    c = collector()
    count(c, ["NVRM: Xid (PCI:0000:99:00): banana", "random", kernel_lines.xid(PCI, 48)])
    assert value(c, names.AGENT_MALFORMED_LINES_TOTAL) == 1
    assert value(c, names.XID_TOTAL, gpu="", uuid="", pci=PCI, xid="48", rule="") == 1


def cycle(status: decisions.CheckStatus) -> exporter.CheckCycle:
    results = (
        result.CheckResult("nvidia-match", status, "module 580.126.09, NVML 580.142"),
        result.passed("ipvs-loaded", "ip_vs in /proc/modules"),
    )
    return exporter.CheckCycle(results, finished_at=1_764_410_000.0, duration_s=0.25)


@pytest.mark.parametrize(
    ("status", "mismatch"),
    [
        pytest.param(decisions.CheckStatus.FAIL, 1.0, id="may21-upgrade-under-running-module"),
        pytest.param(decisions.CheckStatus.PASS, 0.0, id="versions-match"),
        pytest.param(decisions.CheckStatus.UNKNOWN, None, id="unreadable-no-claim"),
    ],
)
def test_check_status_is_one_for_the_current_status_and_zero_for_the_others(
    status: decisions.CheckStatus, mismatch: float | None
) -> None:
    c = collector()
    c.cycle = cycle(status)
    for each in decisions.CheckStatus:
        expected = 1.0 if each is status else 0.0
        assert value(c, names.CHECK_STATUS, check="nvidia-match", status=str(each)) == expected
    assert value(c, names.NVML_MISMATCH) == mismatch
    assert value(c, names.AGENT_CHECK_DURATION) == 0.25
    assert value(c, names.AGENT_LAST_CHECK) == 1_764_410_000.0


def test_no_check_series_before_the_first_cycle() -> None:
    assert value(collector(), names.CHECK_STATUS, check="nvidia-match", status="PASS") is None


def test_tally_round_trips_through_its_saved_form() -> None:
    c = collector()
    count(c, [kernel_lines.gpu_at(PCI, UUID), kernel_lines.xid(PCI, 79),
              *kernel_lines.fallen_off_bus(PCI, 0x2330)])
    restored = exporter.Tally()
    restored.restore(c.tally.as_json())
    assert restored.as_json() == c.tally.as_json()
    restored.count([kernel_lines.xid(PCI, 79)], parse.XidLogParser())  # fresh parser, no GPU at
    assert restored.xids[("", UUID, PCI, 79, "")] == 2  # the UUID is remembered across restarts


def test_gpu_indexes_read_from_the_driver_information_files(tmp_path: Path) -> None:
    folder = tmp_path / "proc/driver/nvidia/gpus/0000:99:00.0"
    folder.mkdir(parents=True)
    (folder / "information").write_text(
        f"Model: \t\t NVIDIA H100 80GB HBM3\nGPU UUID: \t {UUID}\nDevice Minor: \t 4\n"
        "Bus Location: \t 0000:99:00.0\n"
    )
    assert exporter.read_gpu_indexes(tmp_path) == {UUID: "4", PCI: "4"}
    assert exporter.read_gpu_indexes(tmp_path / "missing") == {}


def test_nvswitch_sxid_lines_are_counted_by_switch_code_and_severity() -> None:
    c = collector()
    count(c, [
        "[131453.740743] nvidia-nvswitch0: SXid (PCI:0000:a9:00.0): 20034, Fatal, Link 30 "
        "LTSSM Fault Up",
        "[131453.740758] nvidia-nvswitch0: SXid (PCI:0000:a9:00.0): 20034, Data {0x50610002, "
        "0x10100030}",
        "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted "
        "PRIV error (First)",
        "nvidia-nvswitch0: SXid (PCI:0000:00:00.0): xyz, Fatal error",
    ])
    switch = {"pci": "0000:a9:00.0", "sxid": "20034"}
    assert value(c, names.SXID_TOTAL, **switch, severity="Fatal") == 1
    assert value(c, names.SXID_TOTAL, **switch, severity="") == 1
    assert value(c, names.SXID_TOTAL, pci="0000:05:00.0", sxid="12028", severity="Non-fatal") == 1
    assert value(c, names.AGENT_MALFORMED_LINES_TOTAL) == 1
    restored = exporter.Tally()
    restored.restore(c.tally.as_json())
    assert restored.sxids == c.tally.sxids


def test_counts_saved_before_the_rule_label_restore_with_an_empty_rule() -> None:
    restored = exporter.Tally()
    restored.restore({"xids": [["", UUID, PCI, "79", 2]]})
    assert restored.xids == {("", UUID, PCI, 79, ""): 2}


def test_a_third_xid_13_on_the_same_sm_within_a_day_is_counted_under_its_promotion() -> None:
    c = collector()
    sm = "Graphics SM Warp Exception on (GPC 7, TPC 0, SM 1): Out Of Range Address"
    count(c, [f"[{100 + 60 * i}.000000] {kernel_lines.xid(PCI, 13, sm)}" for i in range(3)])
    card = {"gpu": "", "uuid": "", "pci": PCI, "xid": "13"}
    assert value(c, names.XID_TOTAL, **card, rule="") == 2
    assert value(c, names.XID_TOTAL, **card, rule="xid13-repeat-sm") == 1


def test_the_driver_branch_is_the_loaded_modules_major_version(tmp_path: Path) -> None:
    assert exporter.read_driver_major(tmp_path) is None  # no sysfs under the root
    (tmp_path / "sys/module").mkdir(parents=True)
    assert exporter.read_driver_major(tmp_path) is None  # no nvidia module loaded
    (tmp_path / "sys/module/nvidia").mkdir()
    (tmp_path / "sys/module/nvidia/version").write_text("570.172.08\n")
    assert exporter.read_driver_major(tmp_path) == 570


def test_each_counted_rule_says_whether_its_lines_are_hardware_here(tmp_path: Path) -> None:
    overrides = tmp_path / "overrides.yaml"
    overrides.write_text('events:\n  "xid94:no-reset": hardware\n')
    c = collector()
    c.classes = catalog_xid.load_catalog(overrides)
    count(c, [
        kernel_lines.xid(PCI, 149, "NETIR_BER_EVENT Nonfatal XC0 i0 Link 03 (0x00086226 "
                                   "0x00000001 0x00000000 0x00000000)"),
        kernel_lines.xid(PCI, 94, "Contained: SM (0x1). RST: No, D-RST: No"),
        kernel_lines.xid(PCI, 79),
    ])
    hardware = {"xid149:NETIR_BER_EVENT:0:0x00000001": 0, "xid94:no-reset": 1}
    for rule, expected in hardware.items():
        assert value(c, names.XID_RULE_HARDWARE, rule=rule) == expected
    assert value(c, names.XID_RULE_HARDWARE, rule="") is None  # no rule: the code's class
