"""gpuguard's marks on one node, parsed once: the one reading of its ``gpuguard.io/``
annotations every decision shares (``fleet.Node.marks``).

Each mark is read here the one way it has always been read: a malformed withheld mark is no
mark, a malformed GPU-isolation entry is skipped, a malformed remediation mark is an
``InputError`` raised where it is asked for. ``isolation`` says whose isolation the node
carries — the one definition of "gpuguard's isolation" the policies read: marks whose
``isolated-at`` someone other than gpuguard's field manager wrote are a person's or a
forgery (docs/security.md), never gpuguard's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from gpuguard.errors import InputError
from gpuguard.model import annotation_keys as keys
from gpuguard.model import gpu_isolation as gpu_marks
from gpuguard.model import remediation as repair
from gpuguard.model import withheld as withheld_mark


class Isolation(StrEnum):
    """Whose isolation the node's ``gpuguard.io/isolated-at`` mark is."""

    NONE = "none"  # no mark
    GPUGUARD = "gpuguard"  # written by gpuguard (or its writer was not read)
    FOREIGN = "foreign"  # written by another field manager: a person's or a forgery


@dataclass(frozen=True, slots=True)
class NodeMarks:
    """The node's marks; a mark the node does not carry is None (or empty)."""

    isolated_at: str | None = None
    reason: str | None = None
    boot_id: str | None = None
    verdict: str | None = None
    gpu_uuid: str | None = None
    gpu_pci: str | None = None
    request: str | None = None
    escalation: str | None = None
    evidence_started: str | None = None
    evidence_job_uid: str | None = None
    burnin_job_uid: str | None = None
    gpu_capacity: str | None = None
    return_failed: str | None = None
    burnin_failed: str | None = None
    hold: str | None = None  # a person's hold: the node stays isolated whatever the checks say
    reset_done: str | None = None
    inspected: str | None = None
    withheld: withheld_mark.WithheldMark | None = None
    gpus: tuple[gpu_marks.IsolatedGpu, ...] = ()
    """The isolated GPUs of ``gpuguard.io/gpu-isolated`` (a malformed entry skipped)."""
    gpu_return: frozenset[str] = frozenset()
    """UUIDs a person asked to return (``gpuguard.io/gpu-return``, comma-separated)."""
    gpu_request: str | None = None
    foreign_writer: str | None = None
    """Who wrote ``isolated-at`` when it was not gpuguard, else None."""
    remediation_mark: repair.Mark | None = None
    remediation_error: InputError | None = None

    @classmethod
    def parse(
        cls, annotations: Mapping[str, str], isolation_writers: frozenset[str] | None = None
    ) -> NodeMarks:
        """Every mark of ``annotations``; ``isolation_writers``: the field managers that own
        ``isolated-at`` (None: not read, taken as gpuguard's)."""
        try:
            mark, error = repair.read(annotations), None
        except InputError as e:
            mark, error = None, e
        isolated_at = annotations.get(keys.ISOLATED_AT)
        return cls(
            isolated_at=isolated_at,
            reason=annotations.get(keys.REASON),
            boot_id=annotations.get(keys.BOOT_ID),
            verdict=annotations.get(keys.VERDICT),
            gpu_uuid=annotations.get(keys.GPU_UUID),
            gpu_pci=annotations.get(keys.GPU_PCI),
            request=annotations.get(keys.REQUEST),
            escalation=annotations.get(keys.ESCALATION),
            evidence_started=annotations.get(keys.EVIDENCE_STARTED),
            evidence_job_uid=annotations.get(keys.EVIDENCE_JOB_UID),
            burnin_job_uid=annotations.get(keys.BURNIN_JOB_UID),
            gpu_capacity=annotations.get(keys.GPU_CAPACITY),
            return_failed=annotations.get(keys.RETURN_FAILED),
            burnin_failed=annotations.get(keys.BURNIN_FAILED),
            hold=annotations.get(keys.HOLD),
            reset_done=annotations.get(keys.RESET_DONE),
            inspected=annotations.get(keys.INSPECTED),
            withheld=withheld_mark.parse(annotations.get(keys.WITHHELD)),
            gpus=gpu_marks.parse(annotations.get(keys.GPU_ISOLATED)),
            gpu_return=_uuids(annotations.get(keys.GPU_RETURN, "")),
            gpu_request=annotations.get(keys.GPU_REQUEST),
            foreign_writer=None if isolated_at is None else _foreign(isolation_writers),
            remediation_mark=mark,
            remediation_error=error,
        )

    @property
    def isolation(self) -> Isolation:
        if self.isolated_at is None:
            return Isolation.NONE
        return Isolation.GPUGUARD if self.foreign_writer is None else Isolation.FOREIGN

    @property
    def failed_return(self) -> bool:
        """A return or its burn-in failed: the node is held for a person."""
        return self.return_failed is not None or self.burnin_failed is not None

    @property
    def remediation(self) -> repair.Mark | None:
        """gpuguard's repair mark, None without one; InputError for a malformed one (a new
        one at each read: a cached node's stored error never gathers the readers' frames)."""
        error = self.remediation_error
        if error is not None:
            raise InputError(*error.args) from error.__cause__
        return self.remediation_mark


def _foreign(writers: frozenset[str] | None) -> str | None:
    if writers is None or keys.FIELD_MANAGER in writers:
        return None  # not read, or gpuguard's
    return ", ".join(sorted(writers)) or "no recorded field manager"


def _uuids(text: str) -> frozenset[str]:
    return frozenset(u.strip() for u in text.split(",") if u.strip())
