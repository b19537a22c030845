"""The node agents' conformance statuses for the demo's change rollouts: the real checks
(``agent.checks.running``) run on each node's simulated host tree, exported as the agent's
``gpuguard_check_status`` series with the ``node`` label the chart's PodMonitor adds.

Only nodes in a change's verification run them (the ones the rollout reads), once per boot
and host state, and only while the node is up (the agent pod is down with its node). A
``model.ports.MetricsSource``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from gpuguard.agent.checks import running
from gpuguard.agent.checks import settings as check_settings
from gpuguard.demo import agents, job_commands
from gpuguard.model import annotation_keys as keys
from gpuguard.model import change, fleet
from gpuguard.model import metric_names as names
from gpuguard.sim import state, world

Key = tuple[str, str, str, bool, str]


@dataclass
class HostChecks:
    played: world.World
    hosts: Path
    _seen: dict[str, tuple[Key, list[tuple[str, str]]]] = field(default_factory=dict)

    def samples(self, at: datetime) -> tuple[fleet.MetricSample, ...]:
        out = []
        for node in self.played.nodes:
            if not self._in_a_change(node.name) or not agents.node_up(node, self.played):
                continue
            for check, status in self._statuses(node):
                labels = {"node": node.name, "check": check, "status": status}
                out.append(fleet.MetricSample(names.CHECK_STATUS, labels, 1.0, at))
        return tuple(out)

    def _in_a_change(self, name: str) -> bool:
        """Applying or burning in: requested of a tool, or of a Job (``gpuguard.io/change``)."""
        annotations = self.played.store.get("Node", "", name)["metadata"].get("annotations")
        mark = (annotations or {}).get(keys.CHANGE, "")
        return keys.CHANGE_REQUESTED in (annotations or {}) or any(
            f'"phase":"{phase}"' in mark for phase in (change.Phase.APPLYING, change.Phase.BURN_IN))

    def _statuses(self, node: state.SimNode) -> list[tuple[str, str]]:
        key = (node.boot_id, node.driver_library, node.kernel_release, node.ipvs_persisted,
               node.driver_module)
        seen = self._seen.get(node.name)
        if seen is None or seen[0] != key:
            results = running.run_checks(self.hosts / node.name, check_settings.CheckSettings(),
                                         job_commands.NoHostPrograms())
            seen = (key, [(r.check, str(r.status)) for r in results])
            self._seen[node.name] = seen
        return seen[1]
