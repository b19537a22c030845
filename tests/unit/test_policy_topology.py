"""GPU topology (docs/fleet-health.md#topology): the parser reads real ``nvidia-smi topo -m``
outputs (tests/data/topology/README.md names their sources), and a multi-GPU pod on GPUs not all
NVLink-joined or across NUMA nodes is a ``topology-mismatch``."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuguard.model import decisions
from gpuguard.policy import topology

DATA = Path(__file__).resolve().parents[1] / "data" / "topology"


def read(name: str) -> topology.NodeTopology:
    return topology.parse_topo_matrix((DATA / name).read_text(), node="gpu-node-1")


def test_all_sys_matrix_with_tabs_and_nics() -> None:
    topo = read("rtx4090x8-sys.txt")
    assert topo.gpus == tuple(range(8))
    assert len(topo.links) == 28  # every GPU pair once; NIC columns left out
    assert set(topo.links.values()) == {"SYS"}
    assert topo.numa == {0: "0", 1: "0", 2: "0", 3: "0", 4: "1", 5: "1", 6: "1", 7: "1"}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("rtx4090x8-sys-ansi.txt", id="header-underlined-with-ansi-escapes"),
        pytest.param("rtx4090x8-sys-wrapped.txt", id="header-wrapped-onto-a-second-line"),
    ],
)
def test_the_same_matrix_read_through_escapes_and_a_wrapped_header(name: str) -> None:
    assert read(name) == read("rtx4090x8-sys.txt")


@pytest.mark.parametrize(
    ("name", "numa"),
    [
        pytest.param("h200x1-ansi-590.txt", "0", id="h200-driver-590-as-piped"),
        pytest.param("l40sx1-ansi-595.txt", "0", id="l40s-driver-595-as-piped"),
    ],
)
def test_real_underlined_outputs_of_one_gpu(name: str, numa: str) -> None:
    topo = read(name)
    assert (topo.gpus, dict(topo.numa), dict(topo.links)) == ((0,), {0: numa}, {})


def test_host_bridge_pair_with_the_legend_after_it() -> None:
    topo = read("rtx5090x2-phb.txt")
    assert topo.links == {(0, 1): "PHB"}
    assert not topo.nvlinked(0, 1)


def test_nvlink_pair_with_space_aligned_columns() -> None:
    topo = read("a100x2-nv12-nics.txt")
    assert topo.links == {(0, 1): "NV12"}
    assert topo.nvlinked(1, 0)
    assert topo.numa == {0: "3", 1: "3"}


def test_an_old_driver_without_the_numa_column() -> None:
    text = (
        "        GPU0    GPU1    mlx4_0  CPU Affinity\n"
        "GPU0     X      PIX     PHB     0-9,20-29\n"
        "GPU1    PIX      X      PHB     0-9,20-29\n"
        "mlx4_0  PHB     PHB      X\n"
    )  # the shape of kubernetes/kubernetes#53497's output, two GPUs
    topo = topology.parse_topo_matrix(text)
    assert topo.links == {(0, 1): "PIX"}
    assert topo.numa == {}


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("Failed to initialize NVML: Driver/library version mismatch\n", id="nvml"),
        pytest.param("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tWAT\t0-63\n", id="unknown-cell"),
        pytest.param("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X\n", id="short-row"),
    ],
)
def test_unreadable_output_is_an_error_naming_the_node(text: str) -> None:
    with pytest.raises(topology.TopologyError, match="gpu-node-1"):
        topology.parse_topo_matrix(text, node="gpu-node-1")


def nvl_pairs() -> topology.NodeTopology:
    """H100 NVL style: pairs (0,1) and (2,3) bridged by NVLink, the rest PCIe; 0-1 on NUMA 0,
    2-3 on NUMA 1."""
    links = {(0, 1): "NV12", (2, 3): "NV12", (0, 2): "SYS", (0, 3): "SYS", (1, 2): "SYS",
             (1, 3): "SYS"}  # fmt: skip
    return topology.NodeTopology("gpu-node-1", links, {0: "0", 1: "0", 2: "1", 3: "1"})


def test_a_pod_on_one_nvlink_pair_is_fine() -> None:
    pods = {"gpu-node-1": {"ml/tp2": (0, 1)}}
    assert topology.mismatches({"gpu-node-1": nvl_pairs()}, pods) == []


def test_a_pod_across_nvlink_pairs_is_a_mismatch_on_both_counts() -> None:
    [finding] = topology.mismatches(
        {"gpu-node-1": nvl_pairs()}, {"gpu-node-1": {"ml/tp2": (1, 2)}}
    )
    assert finding.kind == "topology-mismatch"
    assert finding.reason is decisions.Reason.TOPOLOGY_MISMATCH
    assert finding.gpu == "1,2"
    assert "not all joined by NVLink" in finding.detail
    assert "across NUMA nodes" in finding.detail
    assert "GPU1-GPU2 SYS" in finding.detail


def test_a_pcie_only_node_is_judged_on_numa_alone() -> None:
    topo = {"gpu-node-1": read("rtx4090x8-sys.txt")}
    [finding] = topology.mismatches(topo, {"gpu-node-1": {"ml/tp2": (3, 4)}})
    assert "NVLink" not in finding.detail.split("(")[0]
    assert "across NUMA nodes" in finding.detail
    same_zone = topology.mismatches(topo, {"gpu-node-1": {"ml/tp2": (0, 1)}})
    pcie_pair = topology.mismatches({"gpu-node-1": read("rtx5090x2-phb.txt")},
                                    {"gpu-node-1": {"ml/tp2": (0, 1)}})  # fmt: skip
    assert same_zone == pcie_pair == []  # no better place on the node: not a mismatch


def test_a_pod_larger_than_any_better_place_is_not_a_mismatch() -> None:
    topo = {"gpu-node-1": read("rtx4090x8-sys.txt")}
    assert topology.mismatches(topo, {"gpu-node-1": {"ml/all": tuple(range(8))}}) == []
    tp4 = {"gpu-node-1": {"ml/tp4": (0, 1, 2, 3)}}
    assert topology.mismatches({"gpu-node-1": nvl_pairs()}, tp4) == []


@pytest.mark.parametrize(
    ("pods", "why"),
    [
        pytest.param({"gpu-node-1": {"ml/one": (3,)}}, "one GPU", id="single-gpu"),
        pytest.param({"gpu-node-2": {"ml/tp": (0, 2)}}, "node without topology", id="unknown-node"),
        pytest.param({"gpu-node-1": {"ml/tp": (0, 9)}}, "GPU not in matrix", id="unknown-gpu"),
    ],
)
def test_no_finding_without_what_it_needs(
    pods: dict[str, dict[str, tuple[int, ...]]], why: str
) -> None:
    assert topology.mismatches({"gpu-node-1": nvl_pairs()}, pods) == [], why
