"""The small boundaries between decisions and the world, as typing.Protocols.

Adapters and the simulator implement these; fakes beside the tests record calls and inject
errors. Time is always a port (never ``datetime.now()`` inside decisions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar

from gpuguard.model import decisions, fleet, jobs

ReadT_co = TypeVar("ReadT_co", covariant=True)


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


class MetricsSource(Protocol):
    def samples(self, at: datetime) -> tuple[fleet.MetricSample, ...]:
        """The tick's series at instant ``at``; raises SourceError on any bad answer."""
        ...


class NodeMetricsSource(Protocol):
    def samples_of(self, at: datetime, nodes: Sequence[str]) -> tuple[fleet.MetricSample, ...]:
        """The series of ``nodes`` only, at instant ``at`` (none asked: none read); raises
        SourceError on any bad answer. Other nodes' series may come too; readers group by
        ``model.series.node_of``."""
        ...


class ClusterReader(Protocol):
    def nodes(self) -> tuple[fleet.Node, ...]: ...

    def pods(self) -> tuple[fleet.Pod, ...]: ...


class ClusterWriter(Protocol):
    def isolate(self, node: fleet.Node, action: decisions.Action) -> None:
        """Cordon + annotate in one write; ConflictError when the node changed since read."""
        ...

    def annotate(self, node: fleet.Node, annotations: dict[str, str | None]) -> None:
        """Merge annotations (None removes one); ConflictError when the node changed."""
        ...

    def record_event(self, action: decisions.Action, now: datetime) -> None: ...


class Notifier(Protocol):
    def notify(self, action: decisions.Action, now: datetime) -> None:
        """Tell people about an action; raises GpuguardError on failure (callers log it)."""
        ...


@dataclass(frozen=True, slots=True)
class PowerCycled:
    """What a BMC did with a power cycle: ``ok``, and the line a person reads either way
    (the reset types sent and the power states seen, or why it was refused)."""

    ok: bool
    detail: str


class PowerControl(Protocol):
    def power_cycle(self, node: str, pool: str | None) -> PowerCycled:
        """Power the node off, then on, through its BMC (Redfish ``ComputerSystem.Reset``,
        https://redfish.dmtf.org): never raises for a refusal, an error or a timeout of the
        BMC (``ok=False`` with the reason); one call, no retry (docs/remediation.md)."""
        ...


class JobsPort(Protocol):
    """The Kubernetes Jobs the controller creates (burn-in, reset, canary) and reads back."""

    def create(self, manifest: dict[str, Any]) -> str | None: ...

    def result(self, name: str, created_uid: str | None = None) -> jobs.JobResult: ...


class LedgerWriter(Protocol):
    """Appends one line to the per-card fault ledger."""

    def append(self, entry: Any) -> None: ...


class LedgerView(Protocol[ReadT_co]):
    """Reads the per-card fault ledger; ``ReadT_co`` is the adapter's read (the model layer
    does not import the adapter's ``LedgerRead``)."""

    def entries(self) -> ReadT_co: ...


class LedgerPort(LedgerView[ReadT_co], LedgerWriter, Protocol[ReadT_co]):
    """The ledger a step both reads and appends to."""
