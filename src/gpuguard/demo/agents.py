"""gpuguard's own node agent on every simulated node, scraped like the real DaemonSet.

Each node (unless its scenario says ``agent: false``) runs the real ``agent.daemon.Agent``: its
kernel-log follower reads the node's simulated ``/var/log/kern.log`` and its counters
(``gpuguard_xid_total``, ``gpuguard_gpu_fallen_off_bus_total``) are scraped into the world's
Prometheus view at every scrape, with the ``node`` label the chart's PodMonitor adds. So the
agent's Xid path runs end to end in the demo, and a node whose dcgm-exporter is silent is
still seen through its agent. The agent is down while its node is (rebooting, hung) and
restarts on the node's new boot from its saved position and counts, as the pod would.

A scrape reads and renders an agent only when its node's kernel log grew or it restarted;
otherwise it answers what that agent answered last (its counters change only with new lines),
so the agent on every node costs the demo little.

Each agent also reports its node conditions through the real writer (``agent.node_status``)
over HTTP to the simulator's API, as the DaemonSet does through its token
(docs/design.md#fast-path). ``follow`` runs every agent whose kernel log grew right after the
world's step, as the real follower reads within its poll interval; its clock is the world's
plus that interval (the follower reads at most that late).

On a node whose scenario says ``gpu_state: true`` (``gpuguard agent --gpu-state``) the agent
also runs its check cycle — the persistent-state checks, the driver's recovery action and the
NVLink fabric registration, on the node's simulated ``nvidia-smi`` (``sim.smi_query``) — at its
start and then every check interval, as the real check thread does, reporting the conditions
they make (``GpuRecoveryRequired``, ``GpuFabricFault``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import lightkube
from prometheus_client.parser import text_string_to_metric_families

from gpuguard.agent import daemon, journal, node_status
from gpuguard.agent.checks import registry
from gpuguard.agent.checks import running as check_runs
from gpuguard.agent.checks import settings as check_settings
from gpuguard.model import metric_names as names
from gpuguard.model import ports
from gpuguard.sim import smi_query, state, world
from gpuguard.sim import topology as sim_topology

POLL_INTERVAL_S = daemon.POLL_INTERVAL_S
CHECK_INTERVAL = timedelta(seconds=daemon.CHECK_INTERVAL_S)
SCRAPED = frozenset({names.XID_TOTAL, names.FALLEN_OFF_BUS_TOTAL, names.AGENT_KERNEL_LINES_TOTAL})
Sample = tuple[str, Mapping[str, str], float]


@dataclass
class NodeAgents:
    """The agents of a world's nodes; ``scrape`` is a target of ``WorldPrometheus``."""

    played: world.World
    hosts: Path
    state_root: Path
    # each node's agent's client (on a real API server, its own pod-bound token); None: the
    # agents report no node conditions
    client_for: Callable[[str], lightkube.Client] | None = None
    _running: dict[str, tuple[str, daemon.Agent]] = field(default_factory=dict)
    _answers: dict[str, tuple[tuple[str, int], list[Sample]]] = field(default_factory=dict)
    _followed: dict[str, tuple[str, int]] = field(default_factory=dict)
    _checked: dict[str, tuple[str, datetime]] = field(default_factory=dict)

    def follow(self) -> list[str]:
        """Each running agent whose node's kernel log grew (or that restarted) reads it now,
        and writes its conditions when they changed; the nodes whose agent read. Agents with
        the persistent-state checks also run a check cycle when one is due."""
        read = []
        checking = self._gpu_state_nodes()
        for node in self._enabled_up():
            version = (node.boot_id, len(node.kernel_log))
            if self._followed.get(node.name) != version:
                self._agent(node).follow_once()
                self._followed[node.name] = version
                read.append(node.name)
            if node.name in checking:
                self._check_if_due(node)
        return read

    def _check_if_due(self, node: state.SimNode) -> None:
        """The agent's check thread: at its start, then every check interval of world time."""
        last = self._checked.get(node.name)
        now = self.played.now
        if last is not None and last[0] == node.boot_id and now - last[1] < CHECK_INTERVAL:
            return
        self._agent(node).check_once()
        self._checked[node.name] = (node.boot_id, now)

    def _gpu_state_nodes(self) -> set[str]:
        return {spec.name for spec in self.played.scenario.nodes if spec.gpu_state}

    def _enabled_up(self) -> Iterator[state.SimNode]:
        enabled = {spec.name for spec in self.played.scenario.nodes if spec.agent}
        for node in self.played.nodes:
            if node.name in enabled and node_up(node, self.played):
                yield node

    def scrape(self) -> Iterator[Sample]:
        for node in self._enabled_up():
            yield from self._answer(node)

    def _answer(self, node: state.SimNode) -> list[Sample]:
        """The agent's scraped samples; read again only when its log grew or it restarted."""
        version = (node.boot_id, len(node.kernel_log))
        cached = self._answers.get(node.name)
        if cached is not None and cached[0] == version:
            return cached[1]
        agent = self._agent(node)
        agent.follow_once()
        samples: list[Sample] = [
            (sample.name, sample.labels, sample.value)
            for family in text_string_to_metric_families(agent.exposition().decode())
            for sample in family.samples
            if sample.name in SCRAPED
        ]
        self._answers[node.name] = (version, samples)
        return samples

    def _agent(self, node: state.SimNode) -> daemon.Agent:
        running = self._running.get(node.name)
        if running is not None and running[0] == node.boot_id:
            return running[1]
        if running is not None:
            running[1].follower.close()  # the pod died with the old boot
        root = self.hosts / node.name
        config = daemon.AgentConfig(node.name, root, self.state_root / node.name)
        config.state_dir.mkdir(parents=True, exist_ok=True)
        log = root / "var/log/kern.log"
        checks = (
            functools.partial(check_runs.run_checks, root, check_settings.CheckSettings(),
                              SimNvidiaSmi(node), False, registry.GPU_STATE_CHECKS)
            if node.name in self._gpu_state_nodes() else list
        )
        agent = daemon.Agent(
            config, lambda saved: journal.FileFollower(log, saved), checks,
            wall=self._wall, monotonic=self._wall, reporter=self._reporter(node.name, config),
        )
        self._running[node.name] = (node.boot_id, agent)
        return agent

    def _wall(self) -> float:
        """The agent's clock: the world's, plus the poll interval it reads at most that late."""
        return self.played.now.timestamp() + POLL_INTERVAL_S

    def _reporter(
        self, node: str, config: daemon.AgentConfig
    ) -> node_status.ConditionReporter | None:
        if self.client_for is None:
            return None
        patch = node_status.lightkube_patch(self.client_for(node), node)
        return node_status.ConditionReporter(
            patch, config.state_dir, wall=self._wall, monotonic=self._wall
        )

    def close(self) -> None:
        for _, agent in self._running.values():
            agent.follower.close()
        self._running.clear()
        self._answers.clear()
        self._followed.clear()
        self._checked.clear()


@dataclass
class SimNvidiaSmi:
    """The node's ``nvidia-smi`` as the agent runs it: the world's ``topo -m`` text
    (``sim.topology``) or its ``--query-gpu`` answer (``sim.smi_query``)."""

    node: state.SimNode

    def run(self, argv: Sequence[str], *, timeout_s: float) -> ports.CommandResult:
        fields = smi_query.fields_of(argv)
        if fields is None:
            return ports.CommandResult(tuple(argv), 0, sim_topology.topo_matrix(self.node), "")
        return ports.CommandResult(tuple(argv), 0, smi_query.answer(self.node, fields), "")


def node_up(node: state.SimNode, played: world.World) -> bool:
    return not node.reboot_hung and (node.down_until is None or played.now >= node.down_until)
