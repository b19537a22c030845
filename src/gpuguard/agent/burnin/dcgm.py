"""DCGM's long diagnostic (``dcgmi diag -r 4``, includes memtest) as a burn-in check.

Run through the ``CommandRunner`` port with a hard timeout. Level 4 takes tens of minutes
(the lifecycle report [docs/design.md#incidents]: up to ~45 min on a 4-GPU Hopper server), so the
timeout is long and configurable. Any test reported ``Fail`` → FAIL with those lines; a clean run
that shows ``Pass`` → PASS; a timeout, a missing host engine or output we cannot read → UNKNOWN,
never PASS.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable

from gpuguard.model import decisions, ports
from gpuguard.policy import burnin

DCGMI = "dcgmi"
DIAG_ARGV = (DCGMI, "diag", "-r", "4")
DISCOVERY_ARGV = (DCGMI, "discovery", "-l")
DEFAULT_TIMEOUT_S = 60 * 60.0
DISCOVERY_TIMEOUT_S = 30.0
CHECK = "memory-test"
EVIDENCE_LINES = 6

Which = Callable[[str], str | None]
"""``shutil.which``: a port so tests decide whether dcgmi is installed."""


def installed(which: Which = shutil.which) -> bool:
    return which(DCGMI) is not None


def diagnose(
    runner: ports.CommandRunner, timeout_s: float = DEFAULT_TIMEOUT_S
) -> burnin.BurninCheck:
    """Run ``dcgmi diag -r 4`` and judge its output."""
    return judge(runner.run(DIAG_ARGV, timeout_s=timeout_s), timeout_s)


def judge(result: ports.CommandResult, timeout_s: float) -> burnin.BurninCheck:
    command = " ".join(result.argv)
    if result.timed_out:
        return _check(decisions.CheckStatus.UNKNOWN, f"{command} timed out after {timeout_s:.0f}s")
    failed = [line.strip() for line in result.stdout.splitlines() if re.search(r"\bFail", line)]
    if failed:
        evidence = f"{command}: " + " | ".join(failed[:EVIDENCE_LINES])
        return _check(decisions.CheckStatus.FAIL, evidence)
    if result.returncode == 0 and re.search(r"\bPass\b", result.stdout):
        return _check(decisions.CheckStatus.PASS, f"{command}: every test Pass (exit 0)")
    detail = (result.stderr.strip() or result.stdout.strip() or "no output")[-300:]
    return _check(
        decisions.CheckStatus.UNKNOWN, f"{command} exit {result.returncode}, no verdict: {detail}"
    )


def count_gpus(runner: ports.CommandRunner) -> int | None:
    """GPUs DCGM sees (``N GPUs found.``); None when it cannot say."""
    result = runner.run(DISCOVERY_ARGV, timeout_s=DISCOVERY_TIMEOUT_S)
    match = re.search(r"(\d+)\s+GPUs?\s+found", result.stdout)
    return int(match.group(1)) if result.returncode == 0 and match else None


def _check(status: decisions.CheckStatus, evidence: str) -> burnin.BurninCheck:
    return burnin.BurninCheck(CHECK, status, evidence)
