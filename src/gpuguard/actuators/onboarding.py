"""The onboarding gate's write: ONE merge patch guarded by the node's resourceVersion — the
report annotation always, the taint list without ``gpuguard.io/onboarding`` only when the
gate passed — and an Event on the Node (docs/onboarding.md).

A 409 (the node changed while the gate ran) is ``ConflictError``: run the gate again.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from lightkube import Client
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from gpuguard.actuators import nodes
from gpuguard.clients import kube as api_errors
from gpuguard.model import annotation_keys, onboarding

GATE_EVENT_SOURCE = "gpuguard-gate"


def gate_patch(node: onboarding.GateNode, report_json: str, *, passed: bool) -> dict[str, Any]:
    """Report annotation always; the taint list without ours only when the gate passed."""
    patch: dict[str, Any] = {
        "metadata": {
            "resourceVersion": node.resource_version,
            "annotations": {annotation_keys.GATE_REPORT: report_json},
        }
    }
    if passed and node.onboarding:
        kept = [dict(t) for t in node.taints if t.get("key") != annotation_keys.ONBOARDING_TAINT]
        patch["spec"] = {"taints": kept}
    return patch


class GateWriter:
    """Applies the gate's outcome through lightkube; API errors become gpuguard's."""

    def __init__(self, client: Client, *, events_namespace: str = "default") -> None:
        self._client = client
        self._events_namespace = events_namespace

    def apply(
        self,
        node: onboarding.GateNode,
        report_json: str,
        message: str,
        *,
        passed: bool,
        now: datetime,
    ) -> None:
        patch = gate_patch(node, report_json, passed=passed)
        with api_errors.translated(f"patching Node {node.name}"):
            self._client.patch(Node, node.name, patch, patch_type=PatchType.MERGE)
        reason = "OnboardingGatePassed" if passed else "OnboardingGateBlocked"
        event = nodes.node_event(
            node.name, reason, message, warning=not passed, now=now, by=GATE_EVENT_SOURCE
        )
        nodes.record(self._client, event, self._events_namespace)
