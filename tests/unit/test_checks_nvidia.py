"""nvidia-match: loaded module vs NVML library file, from sysfs and file names only."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuguard.agent.checks import hostfs, nvidia
from gpuguard.model.decisions import CheckStatus
from tests.unit import hosttree
from tests.unit.hosttree import HostTree


@pytest.mark.parametrize(
    ("module", "library", "gpus", "expected"),
    [
        pytest.param("580.126.09", "580.126.09", 8, CheckStatus.PASS, id="matching"),
        pytest.param("580.126.09", "580.159.03", 8, CheckStatus.FAIL, id="may21-upgrade-no-reboot"),
        pytest.param(None, "580.159.03", 8, CheckStatus.FAIL, id="gpus-but-no-module"),
        pytest.param(None, None, 8, CheckStatus.FAIL, id="gpus-but-no-driver-at-all"),
        pytest.param(None, None, 0, CheckStatus.PASS, id="cpu-node-no-driver"),
        pytest.param(None, "580.126.09", 0, CheckStatus.WARN, id="library-without-gpu"),
        pytest.param("580.126.09", None, 8, CheckStatus.UNKNOWN, id="module-but-no-library-found"),
    ],
)
def test_module_and_library_versions_decide(
    tmp_path: Path, module: str | None, library: str | None, gpus: int, expected: CheckStatus
) -> None:
    hosttree.with_nvidia(HostTree(tmp_path), module=module, library=library, gpus=gpus)
    assert nvidia.check(tmp_path).status is expected


def test_mismatch_names_both_versions_and_paths(tmp_path: Path) -> None:
    hosttree.with_nvidia(HostTree(tmp_path), module="580.126.09", library="580.159.03")
    outcome = nvidia.check(tmp_path)
    assert "580.126.09" in outcome.evidence
    assert "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.159.03" in outcome.evidence
    assert "/sys/module/nvidia/version" in outcome.evidence
    assert str(tmp_path) not in outcome.evidence
    assert outcome.fix is not None
    assert "reboot" in outcome.fix


def test_gpu_operator_driver_container_library_is_found(tmp_path: Path) -> None:
    hosttree.with_nvidia(
        HostTree(tmp_path),
        library="570.86.15",
        module="570.86.15",
        library_dir="run/nvidia/driver/usr/lib/x86_64-linux-gnu",
    )
    assert nvidia.check(tmp_path).status is CheckStatus.PASS


def test_the_so_1_link_decides_over_a_stale_leftover_file(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    hosttree.with_nvidia(tree, module="580.126.09", library="580.126.09")
    tree.write("usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.183.01")  # not loaded by anyone
    tree.link("usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "libnvidia-ml.so.580.126.09")
    assert nvidia.check(tmp_path).status is CheckStatus.PASS


def test_nvswitch_bridges_are_not_gpus(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    hosttree.with_nvidia(tree, module=None, library=None, gpus=0)
    tree.write("sys/bus/pci/devices/0000:05:00.0/vendor", "0x10de\n")
    tree.write("sys/bus/pci/devices/0000:05:00.0/class", "0x068000\n")
    assert nvidia.check(tmp_path).status is CheckStatus.PASS


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        pytest.param(lambda t: None, "/sys/module: not found", id="no-sysfs"),
        pytest.param(
            lambda t: (t.mkdir("sys/module/nvidia"), t.write("usr/lib64/libnvidia-ml.so.1.0.0")),
            "/sys/module/nvidia/version: not found",
            id="module-dir-without-version",
        ),
        pytest.param(
            lambda t: t.write("sys/module/nvidia/version", "\n"),
            "/sys/module/nvidia/version: empty",
            id="empty-version-file",
        ),
        pytest.param(
            lambda t: t.mkdir("sys/module/ext4"),
            "/sys/bus/pci/devices: not found",
            id="no-module-and-no-pci-bus",
        ),
    ],
)
def test_unreadable_sysfs_is_an_error_not_pass(tmp_path: Path, setup: object, message: str) -> None:
    setup(HostTree(tmp_path))  # type: ignore[operator]
    with pytest.raises(hostfs.HostReadError, match=message):
        nvidia.check(tmp_path)
