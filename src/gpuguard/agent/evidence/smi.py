"""``nvidia-smi -q -d ECC,ROW_REMAPPER``, only when the driver looks responsive.

Monitoring must never hurt the hardware it watches (the incident library,
docs/design.md#incidents): on a hung driver nvidia-smi sits
in D state and can wedge the node further. So it is not run at all when any GPU's config space
reads all ff, when the kernel log of the window has an Xid 79 or a fall-off message, or when
the operator said ``--no-nvidia-smi``; the bundle records why. It is the NVIDIA container
toolkit's nvidia-smi (``hostcmd``): absent when the Job runs without the NVIDIA runtime.
When it runs, it runs under a hard timeout, and only the ECC and row-remapper sections are
asked for (never firmware or clocks). The PCIe link is read from sysfs, not from nvidia-smi:
``PCIE`` is not one of nvidia-smi's ``-d`` display types.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gpuguard.agent.evidence import hostcmd
from gpuguard.catalog import xid as xid_catalog
from gpuguard.model import decisions, evidence, ports, xid

Status = decisions.CheckStatus
POWER_CYCLE = decisions.Verdict.POWER_CYCLE  # the codes of a GPU gone from the bus (Xid 79)
PROGRAM = "nvidia-smi"
ARGS = ("-q", "-d", "ECC,ROW_REMAPPER")
TIMEOUT_S = 20.0
OUTPUT_LIMIT_CHARS = 64 * 1024
_YES = re.compile(r"^\s*(?P<label>Pending|Remapping Failure Occurred)\s*:\s*Yes\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class SmiOptions:
    enabled: bool = True
    timeout_s: float = TIMEOUT_S


def hung_driver_signs(
    gpus: Iterable[evidence.GpuFacts], events: Iterable[xid.KernelEvent]
) -> list[str]:
    """Why the driver may be hung: config space all ff, Xid 79 or a fall-off message."""
    signs = [f"{gpu.pci} config space reads all ff" for gpu in gpus if gpu.config_all_ff]
    signs += [
        f"{'fallen off the bus' if e.xid is None else f'Xid {e.xid}'} on {e.pci or 'a GPU'} "
        f"(kernel log line {e.line_no})"
        for e in events
        if e.kind is xid.KernelEventKind.FALLEN_OFF_BUS
        or (e.xid is not None and xid_catalog.default_verdict(e.xid) is POWER_CYCLE)
    ]
    return signs


def query(
    root: Path, options: SmiOptions, runner: ports.CommandRunner, hung_signs: list[str]
) -> tuple[evidence.NvidiaSmiRun, evidence.EvidenceItem]:
    """Run nvidia-smi unless a reason not to exists; the run (or why not) and its item."""
    if not options.enabled:
        return _skipped("disabled with --no-nvidia-smi")
    if hung_signs:
        return _skipped("driver may be hung: " + "; ".join(hung_signs[:4]))
    result = runner.run([PROGRAM, *ARGS], timeout_s=options.timeout_s)
    if result.returncode == hostcmd.NOT_FOUND:
        return _skipped(f"{PROGRAM} not in the container (no NVIDIA runtime class?)")
    return _ran(" ".join([PROGRAM, *ARGS]), result, options.timeout_s)


def _ran(
    shown: str, result: ports.CommandResult, timeout_s: float
) -> tuple[evidence.NvidiaSmiRun, evidence.EvidenceItem]:
    output = result.stdout[:OUTPUT_LIMIT_CHARS]
    if result.timed_out:
        reason = f"{shown}: timed out after {timeout_s:g}s (driver may be hung)"
        return _result(True, reason, result, output, Status.UNKNOWN)
    if result.returncode != 0:
        reason = f"{shown}: exit {result.returncode}: {result.stderr.strip()[:200]}"
        return _result(True, reason, result, output, Status.UNKNOWN)
    flagged = sorted({match["label"] for match in _YES.finditer(result.stdout)})
    if flagged:
        reason = f"{shown}: row remapper says Yes to: {', '.join(flagged)}"
        return _result(True, reason, result, output, Status.FAIL)
    reason = f"{shown}: answered; no row remap pending, no remapping failure"
    return _result(True, reason, result, output, Status.PASS)


def _result(
    ran: bool,
    reason: str,
    result: ports.CommandResult | None,
    output: str,
    status: decisions.CheckStatus,
) -> tuple[evidence.NvidiaSmiRun, evidence.EvidenceItem]:
    returncode = result.returncode if result is not None else None
    run = evidence.NvidiaSmiRun(ran=ran, reason=reason, returncode=returncode, output=output)
    return run, evidence.EvidenceItem("nvidia-smi", status, reason)


def _skipped(reason: str) -> tuple[evidence.NvidiaSmiRun, evidence.EvidenceItem]:
    return _result(False, f"not run: {reason}", None, "", Status.UNKNOWN)
