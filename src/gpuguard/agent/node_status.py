"""Writes the agent's conditions to its own Node's status, rarely and never fatally.

One strategic-merge patch of ``status.conditions`` on the ``nodes/status`` subresource of the
agent's own Node (``NODE_NAME``, the downward API). Conditions are a list merged by ``type``
(the ``patchMergeKey`` of ``NodeStatus.conditions`` in the Kubernetes API), so the patch
carries only gpuguard's types and the kubelet's and node-problem-detector's conditions stay
as they are (https://kubernetes.io/docs/tasks/manage-kubernetes-objects/update-api-object-kubectl-patch/).

``ConditionReporter`` decides when to write: when a status, reason or message changed, at
most once per ``MIN_INTERVAL_S`` (changes in between are coalesced into the next write), a
heartbeat every ``HEARTBEAT_S`` so ``lastHeartbeatTime`` shows the agent is alive, and after
an error not before a doubling backoff. An error is one log line and
``gpuguard_agent_condition_writes_total{result="error"}``, never a crash. What was last
written is kept in the state directory, so a restarted agent keeps each condition's
``lastTransitionTime`` while its status holds (the agent may not read Nodes: least privilege,
docs/security.md).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import lightkube
from lightkube.core.exceptions import ConfigError
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from gpuguard import errors
from gpuguard.agent import conditions, position
from gpuguard.clients import kube
from gpuguard.model import node_conditions as nc
from gpuguard.model import timestamps

log = logging.getLogger(__name__)

STATE_FILE = "node-conditions.json"
MIN_INTERVAL_S = 1.0
HEARTBEAT_S = 300.0  # node-problem-detector refreshes its conditions on a similar period
MAX_BACKOFF_S = 300.0
Patch = Callable[[dict[str, Any]], None]


class ConditionWriteError(errors.GpuguardError):
    """The API server refused or did not answer the conditions' patch."""


FIELD_MANAGER = "gpuguard-agent"
TIMEOUT_S = 5.0  # the follower thread waits at most this long for one write


def in_cluster(node: str, state_dir: Path) -> ConditionReporter | None:
    """The reporter writing through the pod's projected service-account token (re-read as the
    kubelet rotates it); None, said in one log line, where the pod has no token."""
    try:
        config = lightkube.KubeConfig.from_service_account()
    except (ConfigError, KeyError) as e:
        log.warning("node conditions not reported: no in-cluster service-account token or "
                    "API address (%s); --no-report-conditions turns this off", e)
        return None
    client = kube.client(config, FIELD_MANAGER, TIMEOUT_S)
    return ConditionReporter(lightkube_patch(client, node), state_dir)


def lightkube_patch(client: lightkube.Client, node: str) -> Patch:
    """The patch of ``node``'s status through ``client`` (the only API call the agent makes)."""

    def patch(body: dict[str, Any]) -> None:
        try:
            client.patch(Node.Status, node, body, patch_type=PatchType.STRATEGIC)
        except kube.CALL_ERRORS as e:
            raise ConditionWriteError(f"patch nodes/{node}/status: {e}") from e

    return patch


def body(written: Mapping[str, nc.GpuCondition], heartbeat: float) -> dict[str, Any]:
    """The strategic-merge patch: only gpuguard's condition types, merged by ``type``."""
    beat = timestamps.format_utc(datetime.fromtimestamp(heartbeat, UTC))
    return {"status": {"conditions": [
        {**_condition_json(c), "lastHeartbeatTime": beat}
        for c in sorted(written.values(), key=lambda c: c.type)
    ]}}  # fmt: skip


class ConditionReporter:
    """Offer conditions any time (``offer``), from any thread; ``flush`` writes what is due."""

    def __init__(
        self,
        patch: Patch,
        state_dir: Path,
        *,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._patch = patch
        self._state_dir = state_dir
        self._wall = wall
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self.written: dict[str, nc.GpuCondition] = load(state_dir)
        self.desired: dict[str, nc.GpuCondition] = dict(self.written)
        self.writes = {"ok": 0, "error": 0}
        self._last_attempt: float | None = None
        self._last_success: float | None = None
        self._backoff_s = 0.0

    def offer(self, current: Mapping[str, nc.GpuCondition]) -> None:
        """What the agent sees now; written at once when it changed and none was written in
        the last second, else at a later ``flush``."""
        with self._lock:
            self.desired = conditions.carry_transitions(current, self.desired)
            self._flush()

    def flush(self) -> None:
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        now = self._monotonic()
        if not self._due(now):
            return
        self._last_attempt = now
        desired = dict(self.desired)
        try:
            self._patch(body(desired, self._wall()))
        except ConditionWriteError as e:
            self.writes["error"] += 1
            self._backoff_s = min(max(2 * self._backoff_s, MIN_INTERVAL_S), MAX_BACKOFF_S)
            log.warning("node conditions not written (next try in %.0fs): %s", self._backoff_s, e)
            return
        self.writes["ok"] += 1
        self._backoff_s = 0.0
        self._last_success = now
        self.written = desired
        _save(self._state_dir, desired)

    def _due(self, now: float) -> bool:
        last = self._last_attempt
        if last is not None and now - last < max(MIN_INTERVAL_S, self._backoff_s):
            return False
        if conditions.changed(self.desired, self.written) or self._backoff_s:
            return bool(self.desired)
        return self._last_success is None or now - self._last_success >= HEARTBEAT_S


def load(state_dir: Path) -> dict[str, nc.GpuCondition]:
    """The conditions last written (none when the file is missing or unreadable: the next
    write then starts their transition times afresh)."""
    try:
        raw = json.loads((state_dir / STATE_FILE).read_text())
        return {c.type: c for c in map(_from_json, raw["conditions"])}
    except (OSError, ValueError, KeyError, TypeError) as e:
        if not isinstance(e, FileNotFoundError):
            log.warning("%s unreadable (%s): transition times start afresh", STATE_FILE, e)
        return {}


def _save(state_dir: Path, written: Mapping[str, nc.GpuCondition]) -> None:
    data = {"conditions": [_condition_json(c) for c in written.values()]}
    try:
        position.write_file(state_dir, STATE_FILE, json.dumps(data).encode())
    except OSError as e:
        log.warning("%s not saved: %s", STATE_FILE, e)


def _condition_json(c: nc.GpuCondition) -> dict[str, Any]:
    out = {"type": c.type, "status": c.status, "reason": c.reason, "message": c.message}
    if c.last_transition is not None:
        out["lastTransitionTime"] = timestamps.format_utc(c.last_transition)
    return out


def _from_json(raw: Mapping[str, Any]) -> nc.GpuCondition:
    return nc.GpuCondition(
        type=str(raw["type"]),
        status=str(raw["status"]),
        reason=str(raw.get("reason", "")),
        message=str(raw.get("message", "")),
        last_transition=timestamps.parse_utc(raw.get("lastTransitionTime")),
    )
