"""The simulated device plugin hands a pod the best-connected free GPUs, as the NVIDIA device
plugin's GetPreferredAllocation does — so a pod is split across NUMA nodes only when nothing
better is free (a world that split pods needlessly would make the topology detector look
right for the wrong reason)."""

from __future__ import annotations

import pytest

from gpuguard.sim import state, topology


def node(model: str, count: int) -> state.SimNode:
    gpus = [state.SimGpu(i, state.new_uuid(f"n/{i}"), f"0000:{0x18 + i:02x}:00.0", model)
            for i in range(count)]  # fmt: skip
    return state.SimNode("n", "boot-n", "580.95.05", "580.95.05", gpus=gpus)


@pytest.mark.parametrize(
    ("model", "count", "free", "wanted", "expected"),
    [
        ("NVIDIA RTX PRO 6000", 4, [0, 2, 3], 2, (2, 3)),  # GPU 1 out: the NUMA-local pair
        ("NVIDIA RTX PRO 6000", 4, [0, 1, 2, 3], 2, (0, 1)),  # all free: the lowest pair
        ("NVIDIA RTX PRO 6000", 4, [0, 3], 2, (0, 3)),  # only a split pair is free: that one
        ("NVIDIA H100 NVL", 8, [1, 2, 3, 5], 2, (2, 3)),  # the NVLink-bridged pair
        ("NVIDIA H100 80GB HBM3", 8, [6, 1, 4], 2, (1, 4)),  # all-to-all NVSwitch: lowest
    ],
)
def test_the_preferred_allocation_is_the_best_connected_free_set(
    model: str, count: int, free: list[int], wanted: int, expected: tuple[int, ...]
) -> None:
    assert topology.preferred(node(model, count), free, wanted) == expected


def test_too_few_free_gpus_is_no_allocation() -> None:
    assert topology.preferred(node("NVIDIA RTX PRO 6000", 4), [3], 2) is None
