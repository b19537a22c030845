"""The small boundaries between decisions and the world, as typing.Protocols.

Adapters and the simulator implement these; fakes beside the tests record calls and inject
errors. Time is always a port (never ``datetime.now()`` inside decisions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """Timezone-aware UTC now."""
        ...


@dataclass(frozen=True, slots=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int | None  # None: killed on timeout
    stdout: str
    stderr: str

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


class CommandRunner(Protocol):
    def run(self, argv: Sequence[str], *, timeout_s: float) -> CommandResult:
        """Run argv with a hard timeout; never raise for a non-zero exit or a timeout."""
        ...
