"""Node writes: cordon + gpuguard's annotations in ONE merge patch guarded by the node's
resourceVersion, and a Kubernetes Event on the Node for every action.

A 409 means the node changed since it was read (a human cordoned it, another writer raced):
``ConflictError`` tells the loop to re-read and decide again next tick, never to retry blindly.
There is deliberately no evict and no drain here.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from lightkube import Client
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event, Node
from lightkube.types import PatchType

from gpuguard.clients import kube as api_errors
from gpuguard.model import annotation_keys, decisions, fleet, timestamps

COMPONENT = "gpuguard"


def isolation_patch(node: fleet.Node, action: decisions.Action) -> dict[str, Any]:
    """The one merge patch that cordons and annotates, conditional on what was read. Marks
    left from an earlier isolation of this node (its verdict, request...) are removed."""
    stale: dict[str, str | None] = {
        key: None
        for key in annotation_keys.PER_ISOLATION
        if key in node.annotations and key not in action.annotations
    }
    return {
        "metadata": {
            "resourceVersion": node.resource_version,
            "annotations": stale | dict(action.annotations),
        },
        "spec": {"unschedulable": True},
    }


def uncordon_patch(node: fleet.Node, remove_annotations: tuple[str, ...]) -> dict[str, Any]:
    """The one merge patch that uncordons and removes annotations, conditional on the read."""
    return {
        "metadata": {
            "resourceVersion": node.resource_version,
            "annotations": dict.fromkeys(remove_annotations),
        },
        "spec": {"unschedulable": False},
    }


def event_message(action: decisions.Action) -> str:
    evidence = "; ".join(e.describe() for e in action.evidence)
    return f"{action.kind} ({action.reason}): {action.detail}. Evidence: {evidence}"[:1024]


class NodeWriter:
    """Applies node actions through lightkube; converts API errors to gpuguard's."""

    def __init__(
        self,
        client: Client,
        *,
        events_namespace: str = "default",
        on_written: Callable[[str], None] = lambda resource_version: None,
    ) -> None:
        self._client = client
        self._events_namespace = events_namespace
        self._on_written = on_written  # the written Node's resourceVersion (read-your-writes)

    def isolate(self, node: fleet.Node, action: decisions.Action) -> None:
        self._patch(node.name, isolation_patch(node, action))

    def annotate(self, node: fleet.Node, annotations: dict[str, str | None]) -> None:
        """Set (or, with None, remove) annotations, conditional on what was read."""
        self.mark(node, annotations, {})

    def mark(
        self,
        node: fleet.Node,
        annotations: dict[str, str | None],
        labels: dict[str, str | None],
    ) -> None:
        """Set (or, with None, remove) annotations and labels in one merge patch,
        conditional on what was read."""
        meta: dict[str, Any] = {
            "resourceVersion": node.resource_version,
            "annotations": annotations,
        }
        if labels:
            meta["labels"] = labels
        self._patch(node.name, {"metadata": meta})

    def annotate_after_claim(self, node: str, annotations: dict[str, str | None]) -> None:
        """Set annotations with no resourceVersion precondition: only for gpuguard's own mark
        of an action it claimed by a conditional write just before (docs/remediation.md; the
        node changes meanwhile, e.g. NotReady after a power cycle, and a merge patch touches
        only these keys)."""
        self._patch(node, {"metadata": {"annotations": annotations}})

    def uncordon(self, node: fleet.Node, remove_annotations: tuple[str, ...]) -> None:
        """Return the node: ONE merge patch, conditional on what was read, that uncordons
        and removes the given annotations (``null`` deletes a key in a merge patch)."""
        self._patch(node.name, uncordon_patch(node, remove_annotations))

    def set_schedulable(
        self, node: fleet.Node, annotations: dict[str, str | None], unschedulable: bool | None
    ) -> None:
        """Annotations and, unless None, the cordon in one merge patch, conditional on what
        was read (a change rollout's step, docs/change-management.md)."""
        patch: dict[str, Any] = {
            "metadata": {"resourceVersion": node.resource_version, "annotations": annotations}
        }
        if unschedulable is not None:
            patch["spec"] = {"unschedulable": unschedulable}
        self._patch(node.name, patch)

    def _patch(self, name: str, patch: dict[str, Any]) -> None:
        with api_errors.translated(f"patching Node {name}"):
            written = self._client.patch(Node, name, patch, patch_type=PatchType.MERGE)
        if written.metadata is not None and written.metadata.resourceVersion:
            self._on_written(written.metadata.resourceVersion)

    def set_condition(self, node: str, condition: str, status: bool, reason: str,
                      message: str, now: datetime) -> None:  # fmt: skip
        set_condition(self._client, node, condition, status, reason, message, now)

    def record_event(self, action: decisions.Action, now: datetime) -> None:
        """An Event on the Node, as ``kubectl describe node`` shows it."""
        event = node_event(
            action.node,
            _camel(str(action.reason)),
            event_message(action),
            warning=action.reason in _WARNINGS,
            now=now,
        )
        record(self._client, event, self._events_namespace)


def set_condition(
    client: Client, node: str, condition: str, status: bool, reason: str, message: str,
    now: datetime,
) -> None:
    """One node condition (``status`` True/False) by strategic-merge patch of the Node's
    status, merged by ``type``: the hand-off a cluster's remediator reads
    (docs/remediation.md#hand-off). Needs ``patch`` on ``nodes/status``."""
    stamp = timestamps.format_utc(now)
    body = {"status": {"conditions": [{
        "type": condition, "status": "True" if status else "False", "reason": reason,
        "message": message[:1024], "lastTransitionTime": stamp, "lastHeartbeatTime": stamp,
    }]}}  # fmt: skip
    with api_errors.translated(f"patching nodes/{node}/status condition {condition}"):
        client.patch(Node.Status, node, body, patch_type=PatchType.STRATEGIC)


def node_event(
    node: str, reason: str, message: str, *, warning: bool, now: datetime, by: str = COMPONENT
) -> Event:
    """A Kubernetes Event about a Node (``kubectl describe node`` lists it), named uniquely
    by ``by`` (the part of gpuguard that acted) and the time."""
    return Event(
        metadata=ObjectMeta(name=f"{node}.{by}.{now:%Y%m%d%H%M%S%f}"),
        involvedObject=ObjectReference(kind="Node", name=node, apiVersion="v1"),
        reason=reason,
        message=message[:1024],
        type="Warning" if warning else "Normal",
        source=EventSource(component=COMPONENT),
        firstTimestamp=now,
        lastTimestamp=now,
        count=1,
    )


def record(client: Client, event: Event, events_namespace: str) -> None:
    """Create the Event in the Events namespace (``default`` unless configured); API errors
    as gpuguard's."""
    name = event.involvedObject.name if event.involvedObject else "?"
    with api_errors.translated(f"recording an Event for Node {name}"):
        client.create(event, namespace=events_namespace)


_WARNINGS = {
    decisions.Reason.FAST_PATH,
    decisions.Reason.HARDWARE_XID_WITH_GPU_LOSS,
    decisions.Reason.PHANTOM_UTILIZATION,
    decisions.Reason.BURN_IN_FAILED,
    decisions.Reason.VERDICT_RECORDED,
    decisions.Reason.BREAKER_TRIPPED,
    decisions.Reason.BREAKER_RATE,
    decisions.Reason.BREAKER_LEVEL,
    decisions.Reason.ESCALATED,
    decisions.Reason.CHANGE_FAILED,
    decisions.Reason.REMEDIATION_FAILED,
}


def _camel(reason: str) -> str:
    return "".join(part.capitalize() for part in reason.split("-"))
