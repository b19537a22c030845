"""What one host conformance check returns: a status, the evidence it read, and the fix.

UNKNOWN is never PASS: a check that could not read or understand its input says so (the
node-problem-detector convention), and the runner turns any exception into UNKNOWN.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuguard.model import decisions


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The outcome of one check on one host.

    ``evidence`` names what was read, with paths as seen from the host root (``/etc/...``,
    never the ``--root`` prefix). ``fix`` is the command a human would run, or what ``--fix``
    did; ``None`` when there is nothing to do.
    """

    check: str
    status: decisions.CheckStatus
    evidence: str
    fix: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        """The JSON shape of ``gpuguard check -o json``."""
        return {
            "check": self.check,
            "status": str(self.status),
            "evidence": self.evidence,
            "fix": self.fix,
        }


def passed(check: str, evidence: str) -> CheckResult:
    return CheckResult(check, decisions.CheckStatus.PASS, evidence)


def warned(check: str, evidence: str, fix: str | None = None) -> CheckResult:
    return CheckResult(check, decisions.CheckStatus.WARN, evidence, fix)


def failed(check: str, evidence: str, fix: str | None = None) -> CheckResult:
    return CheckResult(check, decisions.CheckStatus.FAIL, evidence, fix)


def unknown(check: str, evidence: str) -> CheckResult:
    return CheckResult(check, decisions.CheckStatus.UNKNOWN, evidence)


def fixed(check: str, evidence: str, what_was_done: str) -> CheckResult:
    return CheckResult(check, decisions.CheckStatus.FIXED, evidence, what_was_done)
