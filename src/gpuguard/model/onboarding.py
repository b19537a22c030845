"""What the onboarding gate reads of the cluster, as plain values: the node being admitted,
the cluster's other nodes, the API server's version, the node's burn-in Jobs and the agent's
check statuses. ``sources.onboarding`` reads it, ``policy.gate`` decides on it and
``actuators.onboarding`` writes the outcome back (docs/onboarding.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuguard.model import annotation_keys, decisions, jobs


@dataclass(frozen=True, slots=True)
class GateNode:
    """A Node as the gate sees it; ``taints`` as the API holds them, for the write back."""

    name: str
    resource_version: str | None = None
    kubelet_version: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, Any], ...] = ()
    malformed_times: tuple[str, ...] = ()  # node_conditions.malformed_times of its conditions

    @property
    def onboarding(self) -> bool:
        """Whether it still carries the registration taint ``gpuguard.io/onboarding``."""
        return any(t.get("key") == annotation_keys.ONBOARDING_TAINT for t in self.taints)


@dataclass(frozen=True, slots=True)
class BurninJob:
    """A burn-in Job labelled for the node: its name, creation time (RFC 3339) and state."""

    name: str
    created: str
    state: jobs.JobState


@dataclass(frozen=True, slots=True)
class GateView:
    """Everything the gate read. ``api_server_version`` is None when it was not asked for (the
    operator gave it) or could not be read; ``version_unreadable`` then says why."""

    node: GateNode
    others: tuple[GateNode, ...]
    burnin_jobs: tuple[BurninJob, ...]
    check_status: Mapping[str, decisions.CheckStatus]
    api_server_version: str | None = None
    version_unreadable: str | None = None
