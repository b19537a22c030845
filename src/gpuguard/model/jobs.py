"""What a Job gpuguard ran on a node came to: its state and the container's termination
message (where gpuguard's Jobs put their compact JSON result)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class JobState(StrEnum):
    ABSENT = "absent"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class JobResult:
    state: JobState
    message: str | None = None  # the container's termination message
    detail: str = ""
    started_at: datetime | None = None  # when its pod started (None: not yet, or unknown)
