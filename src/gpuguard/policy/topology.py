"""GPU topology: which GPU pairs of a node are joined by NVLink, and a multi-GPU pod placed on
GPUs that are not (docs/fleet-health.md#topology).

``parse_topo_matrix`` reads ``nvidia-smi topo -m``: a matrix whose cell for two GPUs is ``X``
(self), ``NV#`` (a bonded set of # NVLinks), or a PCIe path — ``PIX`` (at most one PCIe
bridge), ``PXB`` (several bridges), ``PHB`` (through a PCIe host bridge), ``NODE`` (between host
bridges within a NUMA node) or ``SYS`` (across the SMP interconnect between NUMA nodes) — then
the GPU's ``CPU Affinity``, ``NUMA Affinity`` and (newer drivers) ``GPU NUMA ID`` columns.
NIC rows and columns and the legend are skipped. Older drivers have no NUMA column. Some
drivers underline the header with ANSI escapes even when piped (``\x1b[4mGPU0 ...\x1b[0m``;
NVSentinel PR #1220), and a header too wide for the terminal that printed it wraps onto the
next line(s): escapes are dropped and a header's continuation lines (names only, no ``X``) are
joined to it.

``mismatches``: a pod holding several GPUs of a node where some pair of them is not joined by
NVLink, or where they sit on different NUMA nodes (a ``SYS`` path or different NUMA affinity),
runs every all-reduce of tensor parallelism over PCIe or the CPU interconnect: the same GPU
count, much slower. That is a ``topology-mismatch`` finding when the node had a better place
for a pod of that size (that many GPUs all NVLink-joined, or all on one NUMA node): a PCIe-only
node or a pod as large as the node is what it is, not a placement mistake. A node whose
topology is unknown gives no finding (never a guess). Pure: text and mappings in, findings out.
"""

from __future__ import annotations

import collections
import itertools
import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from gpuguard.errors import InputError
from gpuguard.model import decisions, fleet
from gpuguard.model import metric_names as names

KIND = "topology-mismatch"
_GPU = re.compile(r"^GPU(\d+)$")
_NVLINK = re.compile(r"^NV\d+$")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
PCIE_PATHS = frozenset({"PIX", "PXB", "PHB", "NODE", "SYS"})
CROSS_NUMA = "SYS"


class TopologyError(InputError):
    """An ``nvidia-smi topo -m`` output that cannot be read."""


@dataclass(frozen=True, slots=True)
class NodeTopology:
    """One node's GPU matrix: ``links[(a, b)]`` (a < b, nvidia-smi GPU indices) is the cell's
    path (``NV18``, ``PIX``, ``SYS``...), ``numa[gpu]`` the GPU's NUMA affinity when known."""

    node: str
    links: Mapping[tuple[int, int], str] = field(default_factory=dict)
    numa: Mapping[int, str] = field(default_factory=dict)

    def link(self, a: int, b: int) -> str | None:
        return self.links.get((min(a, b), max(a, b)))

    def nvlinked(self, a: int, b: int) -> bool:
        return bool(_NVLINK.match(self.link(a, b) or ""))

    @property
    def gpus(self) -> tuple[int, ...]:
        return tuple(sorted({g for pair in self.links for g in pair} | set(self.numa)))


def is_nvlink(path: str) -> bool:
    return bool(_NVLINK.match(path))


def parse_topo_matrix(text: str, node: str = "") -> NodeTopology:
    """The GPU part of ``nvidia-smi topo -m``; TopologyError when there is no GPU matrix."""
    lines = [line for line in _ANSI.sub("", text).splitlines() if line.strip()]
    header_at = next((i for i, line in enumerate(lines) if _is_header(line)), None)
    if header_at is None:
        raise TopologyError(f"nvidia-smi topo -m{_on(node)}: no GPU0 header line")
    header, rows_at = _header(lines, header_at)
    columns = _device_columns(header)
    links: dict[tuple[int, int], str] = {}
    numa: dict[int, str] = {}
    for line in lines[rows_at:]:
        cells = line.split()
        row = _GPU.match(cells[0]) if cells else None
        if row is None:
            if cells and cells[0].startswith("Legend"):
                break
            continue  # NIC rows
        if len(cells) < 1 + len(columns):
            raise TopologyError(f"nvidia-smi topo -m{_on(node)}: row {cells[0]} is short: {line!r}")
        index = int(row.group(1))
        for column, cell in zip(columns, cells[1 : 1 + len(columns)], strict=True):
            other = _GPU.match(column)
            if other is None or int(other.group(1)) == index:
                continue
            _check_cell(cell, node, cells[0], column)
            pair = (min(index, int(other.group(1))), max(index, int(other.group(1))))
            links.setdefault(pair, cell)
        rest = cells[1 + len(columns) :]
        if len(rest) >= 2 and rest[1] != "N/A":
            numa[index] = rest[1]
    if not links and not numa:
        raise TopologyError(f"nvidia-smi topo -m{_on(node)}: no GPU rows")
    return NodeTopology(node, links, numa)


def _is_header(line: str) -> bool:
    """The column line: it starts with ``GPU0`` (after leading blanks), where the GPU0 row has
    ``X`` next."""
    tokens = line.split()
    return tokens[0] == "GPU0" and (len(tokens) < 2 or tokens[1] != "X")


def _header(lines: list[str], at: int) -> tuple[list[str], int]:
    """The header's names, joined across the lines it wrapped onto, and the first row's index:
    a continuation line has names only, no ``X`` (every device row has its own)."""
    names = lines[at].split()
    after = at + 1
    while after < len(lines) and _names_only(lines[after].split()):
        names += lines[after].split()
        after += 1
    return names, after


def _names_only(tokens: list[str]) -> bool:
    return "X" not in tokens and not any(is_nvlink(t) or t in PCIE_PATHS for t in tokens)


def _device_columns(tokens: list[str]) -> list[str]:
    """Column names before ``CPU Affinity`` (GPUs, NICs, mlx devices)."""
    end = tokens.index("CPU") if "CPU" in tokens else len(tokens)
    return tokens[:end]


def _check_cell(cell: str, node: str, row: str, column: str) -> None:
    if not (is_nvlink(cell) or cell in PCIE_PATHS):
        raise TopologyError(
            f"nvidia-smi topo -m{_on(node)}: {row}/{column} is {cell!r}, not NV# or a PCIe path"
        )


def _on(node: str) -> str:
    return f" on {node}" if node else ""


def from_samples(samples: Iterable[fleet.MetricSample]) -> dict[str, NodeTopology]:
    """Each node's matrix from the agent's series: ``gpuguard_gpu_link{node,gpu,peer,link}``
    and ``gpuguard_gpu_numa_node{node,gpu,numa}`` (``agent.topology``)."""
    links: dict[str, dict[tuple[int, int], str]] = defaultdict(dict)
    numa: dict[str, dict[int, str]] = defaultdict(dict)
    for s in samples:
        node, gpu = s.labels.get("node", ""), s.labels.get("gpu", "")
        if not node or not gpu.isdigit():
            continue
        if s.name == names.GPU_NVLINK_PEER and s.labels.get("peer", "").isdigit():
            a, b = int(gpu), int(s.labels["peer"])
            links[node][(min(a, b), max(a, b))] = s.labels.get("link", "")
        elif s.name == names.GPU_NUMA_NODE and s.labels.get("numa"):
            numa[node][int(gpu)] = s.labels["numa"]
    return {node: NodeTopology(node, links.get(node, {}), numa.get(node, {}))
            for node in sorted(set(links) | set(numa))}  # fmt: skip


def mismatches(
    topologies: Mapping[str, NodeTopology],
    pod_gpus: Mapping[str, Mapping[str, tuple[int, ...]]],
) -> list[decisions.Finding]:
    """``topology-mismatch`` for every multi-GPU pod (``pod_gpus[node][namespace/pod]`` = the
    GPU indices it holds) whose GPUs are not all NVLink-joined or not on one NUMA node."""
    found = []
    for node, pods in sorted(pod_gpus.items()):
        topology = topologies.get(node)
        if topology is None:
            continue
        for pod, gpus in sorted(pods.items()):
            finding = _judge(topology, pod, tuple(sorted(set(gpus))))
            if finding is not None:
                found.append(finding)
    return found


def _judge(topology: NodeTopology, pod: str, gpus: tuple[int, ...]) -> decisions.Finding | None:
    """A finding only when the node had a better place for a pod of this size: GPUs all
    NVLink-joined, or all on one NUMA node (an 8-GPU pod on an 8-GPU two-socket node, or a
    2-GPU pod on a PCIe-only node, has none)."""
    if len(gpus) < 2:
        return None
    pairs = list(itertools.combinations(gpus, 2))
    paths = {pair: topology.link(*pair) for pair in pairs}
    if any(path is None for path in paths.values()):
        return None  # a GPU the matrix does not show: unknown, never a guess
    slow = {pair: str(path) for pair, path in paths.items() if not is_nvlink(str(path))}
    zones = {topology.numa[g] for g in gpus if g in topology.numa}
    if all(g in topology.numa for g in gpus):
        crosses = len(zones) > 1  # NUMA affinity says; SYS alone can mean sub-NUMA domains
    else:
        crosses = CROSS_NUMA in slow.values()
    problems = []
    if slow and _fits(topology, len(gpus), is_nvlink):
        problems.append("not all joined by NVLink, though the node has that many that are")
    if crosses and _fits(topology, len(gpus), lambda path: path != CROSS_NUMA, same_numa=True):
        problems.append("across NUMA nodes, though one NUMA node has that many GPUs")
    if not problems:
        return None
    shown = ", ".join(f"GPU{a}-GPU{b} {path}" for (a, b), path in sorted(slow.items())[:6])
    detail = (
        f"pod {pod} holds GPUs {list(gpus)} on {topology.node}: {'; '.join(problems)} ({shown}"
        f"{'' if not zones else '; NUMA ' + ', '.join(sorted(zones))}). Collectives between "
        "them run over PCIe or the CPU interconnect; ask for GPUs on one NVLink domain "
        "(device plugin GetPreferredAllocation, Topology Manager single-numa-node)"
    )
    return decisions.Finding(
        kind=KIND,
        node=topology.node,
        reason=decisions.Reason.TOPOLOGY_MISMATCH,
        gpu=",".join(str(g) for g in gpus),
        evidence=tuple(
            decisions.Evidence("nvidia-smi topo -m", path, labels={"pod": pod, "pair": f"{a}-{b}"})
            for (a, b), path in sorted(slow.items())
        ),
        detail=detail,
    )


_MOST_SUBSETS = 20_000  # beyond this many GPU subsets, say nothing rather than search


def _fits(
    topology: NodeTopology, size: int, good: Callable[[str], bool], *, same_numa: bool = False
) -> bool:
    """Whether some ``size`` GPUs of the node are pairwise ``good`` (and on one NUMA node)."""
    gpus = topology.gpus
    if same_numa and topology.numa:
        counts = collections.Counter(topology.numa.values())
        return max(counts.values()) >= size
    if math.comb(len(gpus), size) > _MOST_SUBSETS:
        return False
    return any(
        all(good(topology.link(a, b) or "") for a, b in itertools.combinations(subset, 2))
        for subset in itertools.combinations(gpus, size)
    )
