"""The GPU topology of a simulated node, per GPU model, and the ``nvidia-smi topo -m`` text a
real node prints for it (tab-separated as recent drivers print it; tests/data/topology holds
real outputs).

- SXM boards with NVSwitch join every GPU pair: ``NV18`` on H100/H200 SXM (18 fourth-generation
  NVLinks per GPU), ``NV12`` on A100 SXM (12 third-generation links), per NVIDIA's HGX
  datasheets.
- NVL cards (H100 NVL, H200 NVL) are bridged in pairs (0-1, 2-3, ...): 600 GB/s per pair over
  NVLink bridges, 12 links at 50 GB/s; other pairs go over PCIe.
- PCIe cards (RTX, L40S, L4, ...): no NVLink; ``NODE`` between host bridges of one NUMA node,
  ``SYS`` across the CPU interconnect.

GPUs 0..n/2-1 sit on NUMA node 0 and the rest on NUMA node 1 (two sockets), as on the 8-GPU
servers of tests/data/topology. The world, not the product: the agent parses this text like a
real node's.
"""

from __future__ import annotations

from gpuguard.sim import state

_ALL_TO_ALL = {"H100 80GB HBM3": "NV18", "H200": "NV18", "A100-SXM4": "NV12", "B200": "NV18"}
_PAIRS = ("H100 NVL", "H200 NVL")


def numa_of(index: int, gpus: int) -> int:
    return 0 if index < max(1, gpus // 2) else 1


def link(model: str, a: int, b: int, gpus: int) -> str:
    """The ``topo -m`` cell between GPUs ``a`` and ``b`` of a node of ``gpus`` ``model`` GPUs."""
    if any(name in model for name in _PAIRS):
        if a // 2 == b // 2:
            return "NV12"
    else:
        for name, cell in _ALL_TO_ALL.items():
            if name in model and "NVL" not in model:
                return cell
    return "NODE" if numa_of(a, gpus) == numa_of(b, gpus) else "SYS"


def topo_matrix(node: state.SimNode) -> str:
    """What ``nvidia-smi topo -m`` prints on ``node`` (GPUs on the bus only)."""
    gpus = [g.index for g in node.gpus if g.on_bus]
    count = len(node.gpus)
    columns = "\t".join(f"GPU{i}" for i in gpus)
    rows = [f"\t{columns}\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for a in gpus:
        cells = [" X " if a == b else link(node.gpus[0].model, a, b, count) for b in gpus]
        zone = numa_of(a, count)
        cpus = "0-55,112-167" if zone == 0 else "56-111,168-223"
        rows.append(f"GPU{a}\t" + "\t".join(cells) + f"\t{cpus}\t{zone}\t\tN/A")
    legend = (
        "", "Legend:", "",
        "  X    = Self",
        "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes"
        " (e.g., QPI/UPI)",
        "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges"
        " within a NUMA node",
        "  NV#  = Connection traversing a bonded set of # NVLinks",
    )  # fmt: skip
    return "\n".join(rows + list(legend)) + "\n"
