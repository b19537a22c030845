"""The opt-in node label ``gpuguard.io/fit-to-train=yes|no`` (``health.label``;
docs/audit.md#health-verdict), kept up to date every tick from what the tick knows: each
node's state, the guard's decisions and findings about it, withheld faults and its GPUs
(``policy.fitness``). The tick does not read the agent's checks or burn-in Jobs; those are
``gpuguard health``'s. Written only when the value changes, by the leader, never in a dry run."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from gpuguard.controller import fleet_health
from gpuguard.controller import gpu_isolation as gpu_step
from gpuguard.errors import GpuguardError
from gpuguard.model import annotation_keys, decisions, fleet
from gpuguard.policy import fitness

log = logging.getLogger(__name__)


@dataclass
class FitnessLabel:
    writer: gpu_step.Marker

    def run(
        self,
        nodes: Iterable[fleet.Node],
        at: datetime,
        actions: Iterable[decisions.Action],
        findings: Iterable[decisions.Finding],
        *,
        may_write: Callable[[], bool],
        fleet: fleet_health.FleetHealth | None = None,
    ) -> dict[str, str]:
        """The label value per node; the changed ones written when ``may_write()``."""
        actions, findings = tuple(actions), tuple(findings)
        values: dict[str, str] = {}
        for node in nodes:
            said = fitness.guard_said(actions, findings, node.name)
            links = (fitness.link_problems(node.name, fleet.findings, fleet.persistent)
                     if fleet else ())
            unread = None if fleet else "the fleet-health step did not run"
            facts = fitness.FitnessFacts(node, at, said, None, {}, (), links, unread)
            value = "yes" if fitness.verdict(facts, require_conformance=False).fit else "no"
            values[node.name] = value
            if node.labels.get(annotation_keys.FIT_LABEL) != value and may_write():
                self._write(node, value)
        return values

    def _write(self, node: fleet.Node, value: str) -> None:
        try:
            self.writer.mark(node, {}, {annotation_keys.FIT_LABEL: value})
        except GpuguardError as e:
            log.warning("%s: %s label not written (next tick retries): %s", node.name,
                        annotation_keys.FIT_LABEL, e)
