"""gpuguard's own repair of one isolation, kept on the node as ``gpuguard.io/remediation``
(docs/remediation.md): which action, on which isolation, when, its result and why.

The mark is written ``started`` before the action (conditional on the node as read: two
replicas or two ticks never both act) and again with the result after it, so a controller that
dies mid-way leaves ``started``, never a second power cycle.

One per isolation: the mark is one of the per-isolation marks a return removes
(``annotation_keys.PER_ISOLATION``), and a node carrying one is never acted on again for that
isolation, so a failed action ends in the person's request and never loops. A ``done`` mark
on a node still isolated is a repair in flight (the return checks and the burn-in decide
next): the breaker counts those (``policy.remediation``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from gpuguard.errors import InputError
from gpuguard.model import annotation_keys, timestamps

CARD_UUID = re.compile(r"^GPU-[0-9a-fA-F-]{8,64}$")
"""A card the GPU reset may name: the shape the chart's ``gpuguard-jobs`` policy admits in the
reset Job's ``nvidia-smi -r -i`` (anything else there is refused, so it is never built)."""

HAND_OFF_CONDITION = "GpuguardRemediationRequired"
"""The node condition a hand-off sets True and a return sets False (docs/remediation.md)."""


class Action(StrEnum):
    POWER_CYCLE = "power-cycle"  # off, then on, through the node's BMC (Redfish)
    GPU_RESET = "gpu-reset"  # nvidia-smi -r on the held GPU, by a pinned Job
    HAND_OFF = "hand-off"  # a node condition for the cluster's own remediator


class Result(StrEnum):
    STARTED = "started"  # written before the action: a crash mid-way never repeats it
    DONE = "done"  # the action was carried out: the return checks and the burn-in decide
    FAILED = "failed"  # refused, failed or timed out: the person's request says why
    PUBLISHED = "published"  # handed off: the cluster's remediator acts


@dataclass(frozen=True, slots=True)
class Mark:
    action: Action
    result: Result
    at: datetime
    isolated_at: str  # the isolation it was made for (``gpuguard.io/isolated-at``)
    detail: str
    job: str = ""  # ``<name>=<uid>`` of the Job that carries it out (the GPU reset), else ""

    def render(self) -> str:
        return json.dumps(
            {"action": str(self.action), "result": str(self.result),
             "at": timestamps.format_utc(self.at), "isolated_at": self.isolated_at,
             "detail": self.detail, **({"job": self.job} if self.job else {})},
            sort_keys=True,
        )  # fmt: skip

    @property
    def in_flight(self) -> bool:
        """Started or carried out on a node that has not returned yet (a return removes
        the mark)."""
        return self.result in (Result.STARTED, Result.DONE)


def read(annotations: Mapping[str, str]) -> Mark | None:
    """The node's mark, None without one; InputError naming the key for a malformed one."""
    raw = annotations.get(annotation_keys.REMEDIATION)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        at = timestamps.parse_utc(data["at"])
        if at is None:
            raise ValueError(f"at {data['at']!r} is not a time with a zone")
        return Mark(
            Action(data["action"]), Result(data["result"]), at, str(data["isolated_at"]),
            str(data["detail"]), str(data.get("job", "")),
        )  # fmt: skip
    except (ValueError, KeyError, TypeError) as e:
        key = annotation_keys.REMEDIATION
        raise InputError(f"{key} {raw!r}: not a remediation mark: {e}") from e


@dataclass(frozen=True, slots=True)
class CardFacts:
    """What a GPU reset needs to know of the isolated card (None: unknown, never reset):
    a pending or failed row remap (DCGM ``DCGM_FI_DEV_ROW_REMAP_PENDING``/``_FAILURE``: a reset
    would apply a pending remap without the burn-in that must follow, a failed one is an RMA)
    and the processes holding it open (the agent's ``gpuguard_gpu_processes``: "there can't
    be any applications using these devices", nvidia-smi(1) ``-r``)."""

    uuid: str
    row_remap_pending: bool | None
    row_remap_failed: bool | None
    processes: int | None
