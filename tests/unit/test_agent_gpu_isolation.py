"""The isolation Job's host side on a host tree with a fake nvidia-smi: what it runs, what it
writes, what it reads back, and what it reports when the driver does not answer."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuguard.agent import commands
from gpuguard.agent import gpu_isolation as host
from gpuguard.catalog import xid as xid_catalog
from gpuguard.cli.main import app
from gpuguard.model import ports

CLASSES = xid_catalog.packaged_catalog()  # the classes without a cluster override file

BAD, GOOD = "GPU-0a8e0faa-d59d-595d-bf96-0adbb520ef6b", "GPU-1b9f1abb-e6ae-4a6e-8c07-1bec631f0c7c"


@dataclass
class FakeSmi:
    """nvidia-smi on a 2-GPU host: ``-c`` sets a mode; ``broken`` makes every call fail."""

    modes: dict[str, str] = field(default_factory=lambda: {BAD: "Default", GOOD: "Default"})
    calls: list[tuple[str, ...]] = field(default_factory=list)
    broken: bool = False
    remapped: dict[str, str] = field(default_factory=dict)  # `pending, failure` per UUID

    def run(self, argv: Sequence[str], *, timeout_s: float) -> ports.CommandResult:
        self.calls.append(tuple(argv))
        if self.broken:
            return ports.CommandResult(tuple(argv), None, "", "")
        if any(a.startswith("--query-remapped-rows") for a in argv):
            return ports.CommandResult(
                tuple(argv), 0, self.remapped.get(argv[argv.index("-i") + 1], "No, No") + "\n", "")
        if "-c" in argv:
            uuid = argv[argv.index("-i") + 1]
            if uuid not in self.modes:
                return ports.CommandResult(tuple(argv), 6, "", "No devices were found")
            self.modes[uuid] = argv[argv.index("-c") + 1].title()
            return ports.CommandResult(tuple(argv), 0, "ok", "")
        out = "".join(f"{uuid}, {mode}\n" for uuid, mode in self.modes.items())
        return ports.CommandResult(tuple(argv), 0, out, "")


def kernel_log(root: Path, xid: str = "48, pid=1, DBE (Double Bit Error) ECC Error") -> None:
    log = root / "var" / "log" / "kern.log"
    log.parent.mkdir(parents=True)
    log.write_text(
        "Aug 10 15:36:00 gpu-node-a kernel: NVRM: GPU at PCI:0000:2a:00: " + BAD + "\n"
        f"Aug 10 15:36:00 gpu-node-a kernel: NVRM: Xid (PCI:0000:2a:00): {xid}\n"
    )


def test_apply_prohibits_excludes_and_confirms_from_the_kernel_log(tmp_path: Path) -> None:
    kernel_log(tmp_path)
    smi = FakeSmi()
    report = host.apply(host.NvidiaSmi(smi, tmp_path), [BAD], tmp_path, CLASSES)
    assert report.ok
    ((gpu),) = report.gpus
    assert (gpu.compute_mode, gpu.excluded, gpu.kernel_fault) == ("PROHIBITED", True, True)
    assert smi.modes[GOOD] == "Default"  # only the bad card
    assert (tmp_path / "etc/gpuguard/excluded-gpus").read_text() == f"{BAD}\n"
    assert json.loads(report.to_json())["ok"] is True


def test_undo_puts_it_back_and_keeps_the_other_exclusions(tmp_path: Path) -> None:
    smi = FakeSmi()
    control = host.NvidiaSmi(smi, tmp_path)
    host.apply(control, [BAD, GOOD], tmp_path, CLASSES)
    report = host.undo(control, [BAD], tmp_path, CLASSES)
    assert report.ok
    assert smi.modes == {BAD: "Default", GOOD: "Prohibited"}
    assert control.excluded() == {GOOD}


def test_a_driver_that_does_not_answer_is_not_held(tmp_path: Path) -> None:
    report = host.apply(host.NvidiaSmi(FakeSmi(broken=True), tmp_path), [BAD], tmp_path, CLASSES)
    assert not report.ok
    ((gpu),) = report.gpus
    assert gpu.compute_mode == "unknown"
    assert "timed out" in gpu.error
    assert any("compute modes not read back" in note for note in report.notes)


def test_undo_of_a_card_that_left_the_host_is_done(tmp_path: Path) -> None:
    smi = FakeSmi(modes={GOOD: "Default"})
    control = host.NvidiaSmi(smi, tmp_path)
    control.write_excluded({BAD})
    report = host.undo(control, [BAD], tmp_path, CLASSES)
    assert report.ok
    assert report.gpus[0].compute_mode == host.ABSENT


@pytest.mark.parametrize(("remapped", "pending"), [
    ("No, No", False), ("Yes, No", True), ("No, Yes", True), ("[N/A], [N/A]", None)])
def test_undo_reads_the_cards_row_remap_state(
    tmp_path: Path, remapped: str, pending: bool | None
) -> None:
    smi = FakeSmi(remapped={BAD: remapped})
    host.apply(host.NvidiaSmi(smi, tmp_path), [BAD], tmp_path, CLASSES)
    report = host.undo(host.NvidiaSmi(smi, tmp_path), [BAD], tmp_path, CLASSES)
    ((gpu),) = report.gpus
    assert gpu.remap_pending is pending
    assert json.loads(report.to_json())["gpus"][0]["remap_pending"] is pending


# ---- the cluster's Xid classes (--xid-overrides, the controller's file) -----------------------

XID13 = "13, pid=4242, name=python3, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0)"
NVLINK5_IGNORE = ("149, NETIR_BER_EVENT Nonfatal XC0 i0 Link 03 (0x00086226 0x00000001 "
                  "0x00000000 0x00000000)")
NVLINK5_RESET = "149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 0x00000000 0x00000000)"


@pytest.mark.parametrize(("xid", "overrides", "confirmed"), [
    (XID13, None, False),  # packaged: Xid 13 is the application's
    (XID13, "classes:\n  13: hardware\n", True),  # this cluster calls it hardware
    ("48, pid=1, DBE (Double Bit Error) ECC Error", "classes:\n  48: user\n", False),
    (NVLINK5_IGNORE, None, False),  # NVIDIA's decode: IGNORE
    (NVLINK5_RESET, None, True),  # NVIDIA's decode: RESET_GPU
    (NVLINK5_IGNORE, 'events:\n  "xid149:NETIR_BER_EVENT:0:0x00000001": hardware\n', True),
], ids=["user-xid-packaged", "user-xid-made-hardware", "hardware-xid-made-user",
        "nvlink5-ignore-line", "nvlink5-reset-line", "nvlink5-rule-made-hardware"])
def test_the_kernel_log_confirms_a_card_in_the_clusters_classes(
    tmp_path: Path, xid: str, overrides: str | None, confirmed: bool
) -> None:
    kernel_log(tmp_path, xid)
    path = None
    if overrides is not None:
        path = tmp_path / "xid-overrides.yaml"
        path.write_text(overrides)
    classes = xid_catalog.load_catalog(path)
    report = host.apply(host.NvidiaSmi(FakeSmi(), tmp_path), [BAD], tmp_path, classes)
    assert report.gpus[0].kernel_fault is confirmed


def _isolate(root: Path, *flags: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(
        app, ["gpu-isolate", "apply", "--root", str(root), "--uuid", BAD, *flags])
    return result.exit_code, result.stdout, result.stderr


def test_the_command_confirms_per_its_override_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kernel_log(tmp_path, XID13)
    overrides = tmp_path / "xid-overrides.yaml"
    overrides.write_text("classes:\n  13: hardware\n")
    monkeypatch.setattr(commands, "SubprocessRunner", FakeSmi)  # no real nvidia-smi
    code, packaged, _ = _isolate(tmp_path)
    assert code == 0
    assert json.loads(packaged)["gpus"][0]["kernel_fault"] is False
    code, overridden, _ = _isolate(tmp_path, "--xid-overrides", str(overrides))
    assert code == 0
    assert json.loads(overridden)["gpus"][0]["kernel_fault"] is True


@pytest.mark.parametrize("text", ["classes:\n  13: broken\n", "classes: [13]\n", None])
def test_a_bad_override_file_stops_the_command_before_any_gpu_is_touched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str | None
) -> None:
    overrides = tmp_path / "xid-overrides.yaml"
    if text is not None:
        overrides.write_text(text)
    smi = FakeSmi()
    monkeypatch.setattr(commands, "SubprocessRunner", lambda: smi)
    code, out, err = _isolate(tmp_path, "--xid-overrides", str(overrides))
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line.startswith(f"error: {overrides}")
    assert out == ""
    assert smi.calls == []
    assert not (tmp_path / host.EXCLUDED_FILE).exists()
