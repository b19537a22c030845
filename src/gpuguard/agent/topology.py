"""The node's GPU topology from ``nvidia-smi topo -m``, read rarely and never on a hung driver
(docs/fleet-health.md#topology; docs/design.md#invariants: monitoring never hurts the hardware).

``TopologyProbe.run`` reads the matrix at most once per ``every`` (6 h by default: NVLink
wiring changes only with hardware), under a hard timeout, and not at all while the caller sees
signs of a hung driver (``agent.evidence.smi.hung_driver_signs``: config space all ff, Xid 79,
fallen off the bus) — on a hung driver nvidia-smi sits in D state. ``topo -m`` asks the driver
for PCIe and NVLink paths only, never firmware or clocks. The last good matrix is kept and
exported as ``gpuguard_gpu_link{node,gpu,peer,link}`` and ``gpuguard_gpu_numa_node{node,gpu,
numa}``; ``gpuguard_gpu_topology_read`` is 1 when the last attempt read it, 0 when it was
skipped or failed (the reason is logged), so "no topology" is never read as "all NVLink".
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from prometheus_client.core import GaugeMetricFamily

from gpuguard.agent.evidence import hostcmd
from gpuguard.model import metric_names as names
from gpuguard.model import ports
from gpuguard.policy import topology

log = logging.getLogger(__name__)
PROGRAM = "nvidia-smi"
ARGS = ("topo", "-m")
TIMEOUT_S = 20.0
EVERY = timedelta(hours=6)


@dataclass
class TopologyProbe:
    node: str
    runner: ports.CommandRunner
    every: timedelta = EVERY
    timeout_s: float = TIMEOUT_S
    last: topology.NodeTopology | None = None
    last_try: datetime | None = None
    read_ok: bool = False
    why_not: str = "not read yet"

    def run(self, now: datetime, hung_signs: Sequence[str] = ()) -> topology.NodeTopology | None:
        """Read the matrix when due and the driver looks responsive; the last good one."""
        if self.last_try is not None and now - self.last_try < self.every:
            return self.last
        if hung_signs:
            self._skip("driver may be hung: " + "; ".join(hung_signs[:4]))
            return self.last  # try again next call: the signs may clear after a reboot
        self.last_try = now
        result = self.runner.run([PROGRAM, *ARGS], timeout_s=self.timeout_s)
        if result.timed_out:
            self._skip(f"{PROGRAM} topo -m timed out after {self.timeout_s:g}s (driver hung?)")
        elif result.returncode == hostcmd.NOT_FOUND:
            self._skip(f"{PROGRAM} not in the container (no NVIDIA runtime class?)")
        elif result.returncode != 0:
            stderr = result.stderr.strip()[:200]
            self._skip(f"{PROGRAM} topo -m: exit {result.returncode}: {stderr}")
        else:
            try:
                self.last = topology.parse_topo_matrix(result.stdout, self.node)
            except topology.TopologyError as e:
                self._skip(str(e))
            else:
                self.read_ok, self.why_not = True, ""
        return self.last

    def _skip(self, why: str) -> None:
        self.read_ok, self.why_not = False, why
        log.warning("GPU topology not read on %s: %s", self.node, why)

    def families(self) -> list[GaugeMetricFamily]:
        """The agent's topology series (the last good matrix)."""
        read = GaugeMetricFamily(names.GPU_TOPOLOGY_READ,
                                 "1 when the last nvidia-smi topo -m read succeeded.",
                                 labels=["node"])  # fmt: skip
        read.add_metric([self.node], 1.0 if self.read_ok else 0.0)
        links = GaugeMetricFamily(names.GPU_NVLINK_PEER,
                                  "1 per GPU pair and its nvidia-smi topo -m path (NV#, PIX...).",
                                  labels=["node", "gpu", "peer", "link"])  # fmt: skip
        numa = GaugeMetricFamily(names.GPU_NUMA_NODE, "1 per GPU and its NUMA affinity.",
                                 labels=["node", "gpu", "numa"])  # fmt: skip
        if self.last is not None:
            for (a, b), path in sorted(self.last.links.items()):
                links.add_metric([self.node, str(a), str(b), path], 1.0)
            for gpu, zone in sorted(self.last.numa.items()):
                numa.add_metric([self.node, str(gpu), zone], 1.0)
        return [read, links, numa]
