"""The domain model's shared conventions: one PCI form, one duration syntax, node facts."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from gpuguard.errors import InputError
from gpuguard.model import durations, fleet, pci


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param("PCI:0000:01:00", "0000:01:00.0", id="kernel-xid-line"),
        pytest.param("(0000:03:00)", "0000:03:00.0", id="old-driver-parenthesised"),
        pytest.param("00000000:01:00.0", "0000:01:00.0", id="dcgm-exporter-8-digit-domain"),
        pytest.param("0000:CB:00.0", "0000:cb:00.0", id="uppercase-lowered"),
        pytest.param("PCI:0018:01:00", "0018:01:00.0", id="non-zero-domain-gb200"),
        pytest.param("0000:01:00.0", "0000:01:00.0", id="already-sysfs-form"),
        pytest.param("01:00.0", "0000:01:00.0", id="lspci-short-form"),
    ],
)
def test_every_pci_spelling_maps_to_the_sysfs_form(raw: str, expected: str) -> None:
    assert pci.normalize_pci(raw) == expected


@pytest.mark.parametrize("raw", ["PCI:...", "", "GPU-1234", "0000:01:40.0", "1:2:3:4"])
def test_non_addresses_are_errors_naming_the_input(raw: str) -> None:
    with pytest.raises(InputError, match="PCI"):
        pci.normalize_pci(raw)
    assert pci.try_normalize_pci(raw) is None


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [("90s", 90), ("10m", 600), ("25h", 90000), ("3d", 259200), ("1h30m", 5400), (45, 45)],
)
def test_durations_as_scenarios_write_them(raw: str | int, seconds: int) -> None:
    assert durations.parse_duration(raw) == timedelta(seconds=seconds)


@pytest.mark.parametrize("raw", ["10 minutes", "m10", "", "-5", "3x"])
def test_bad_durations_name_the_input(raw: str) -> None:
    with pytest.raises(InputError, match=r"events\[2\]\.at"):
        durations.parse_duration(raw, what="events[2].at")


def test_format_duration_is_short_and_human() -> None:
    assert durations.format_duration(timedelta(minutes=12, seconds=26)) == "12m26s"
    assert durations.format_duration(timedelta(days=3, hours=2, minutes=5)) == "3d2h"


def test_gpu_loss_is_capacity_minus_allocatable() -> None:
    node = fleet.Node(name="gpu-node-b", boot_id="b1", gpu_capacity=8, gpu_allocatable=7)
    assert node.gpus_missing == 1
    assert not node.ready
    assert fleet.Node("n", "b", 8, 8, conditions={"Ready": "True"}).ready


def _snapshot_of(nodes: tuple[fleet.Node, ...], pods: tuple[fleet.Pod, ...]) -> fleet.FleetSnapshot:
    gpus = tuple(fleet.Gpu(n.name, 0, f"GPU-{n.name}", "0000:18:00.0", "H100") for n in nodes)
    return fleet.FleetSnapshot(datetime(2026, 12, 1, tzinfo=UTC), nodes, gpus, pods)


def test_snapshot_lookups_by_node_answer_as_a_scan_would() -> None:
    first, again = fleet.Node("gpu-a", "boot-1", 8, 8), fleet.Node("gpu-a", "boot-2", 8, 8)
    pods = tuple(
        fleet.Pod("train", f"p{i}", node, fleet.PodPhase.RUNNING)
        for i, node in enumerate(("gpu-a", None, "gpu-b", "gpu-a"))
    )
    snapshot = _snapshot_of((first, fleet.Node("gpu-b", "b", 8, 8), again), pods)
    assert snapshot.node("gpu-a") is first  # the first of a repeated name
    assert snapshot.node("gpu-c") is None
    assert [p.name for p in snapshot.pods_on("gpu-a")] == ["p0", "p3"]  # in the snapshot's order
    assert snapshot.pods_on("gpu-c") == ()
    assert [g.uuid for g in snapshot.gpus_of("gpu-b")] == ["GPU-gpu-b"]


def test_a_changed_snapshot_looks_up_its_own_nodes() -> None:
    snapshot = _snapshot_of((fleet.Node("gpu-a", "boot-1", 8, 8),), ())
    assert snapshot.node("gpu-a") is not None  # the lookups of this snapshot are built
    changed = replace(snapshot, nodes=(fleet.Node("gpu-b", "boot-1", 8, 8),))
    assert changed.node("gpu-a") is None
    assert changed.node("gpu-b") is not None
    assert changed == replace(snapshot, nodes=changed.nodes)  # the lookups are no part of equality
