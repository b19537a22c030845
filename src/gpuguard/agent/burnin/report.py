"""What a burn-in reports: the full JSON document and the compact termination message.

A Kubernetes Job's termination message is capped at 4096 bytes; ``summary`` keeps the verdict,
counts, per-GPU TFLOPS and each check's status within ``SUMMARY_LIMIT`` bytes, shortening the
evidence first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gpuguard.policy import burnin

SUMMARY_LIMIT = 4000
EVIDENCE_LIMITS = (400, 160, 60, 0)
CPU_NOTE = "CPU mode: not a burn-in result (a pure-Python matmul for tests; it never passes)."


@dataclass(frozen=True, slots=True)
class BurninReport:
    mode: burnin.Mode
    device: str
    dtype: str
    size: int
    duration_s: float
    gpus: tuple[burnin.GpuResult, ...]
    fractions: tuple[float | None, ...]
    expected_gpus: int | None
    found_gpus: int | None
    verdict: burnin.BurninVerdict
    note: str

    @property
    def passed(self) -> bool:
        return self.verdict.passed

    @property
    def ratio_min_max(self) -> float | None:
        return burnin.min_max_ratio(self.gpus)

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode.value,
            "device": self.device,
            "dtype": self.dtype,
            "size": self.size,
            "duration_s": self.duration_s,
            "gpus": [_gpu(g, f) for g, f in zip(self.gpus, self.fractions, strict=True)],
            "expected_gpus": self.expected_gpus,
            "found_gpus": self.found_gpus,
            "ratio_min_max": _round(self.ratio_min_max, 3),
            "checks": [_check(check) for check in self.verdict.checks],
            "passed": self.passed,
            "note": self.note,
        }

    def summary(self, limit: int = SUMMARY_LIMIT) -> str:
        """Compact JSON of at most ``limit`` bytes (UTF-8) for the Job's termination message."""
        for evidence_limit in EVIDENCE_LIMITS:
            text = _compact(self._summary(evidence_limit, with_gpus=True))
            if len(text.encode()) <= limit:
                return text
        return _compact(self._summary(0, with_gpus=False))[:limit]

    def _summary(self, evidence_limit: int, *, with_gpus: bool) -> dict[str, Any]:
        data: dict[str, Any] = {
            "passed": self.passed,
            "mode": self.mode.value,
            "device": self.device,
            "found_gpus": self.found_gpus,
            "expected_gpus": self.expected_gpus,
            "ratio_min_max": _round(self.ratio_min_max, 3),
            "checks": [_check(c, evidence_limit) for c in self.verdict.checks],
        }
        if with_gpus:
            data["tflops"] = [_round(gpu.tflops, 1) for gpu in self.gpus]
            data["note"] = _shorten(self.note, max(evidence_limit, 80))
        return data


def _gpu(result: burnin.GpuResult, fraction: float | None) -> dict[str, Any]:
    data: dict[str, Any] = {"index": result.index, "name": result.name}
    if result.uuid:
        data["uuid"] = result.uuid
    data |= {
        "tflops": _round(result.tflops, 2),
        "fraction_of_expected": _round(fraction, 3),
        "error": result.error,
    }
    return data


def _check(check: burnin.BurninCheck, evidence_limit: int | None = None) -> dict[str, str]:
    evidence = check.evidence
    if evidence_limit is not None:
        evidence = _shorten(evidence, evidence_limit)
    return {"check": check.check, "status": check.status.value, "evidence": evidence}


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _compact(data: dict[str, Any]) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)
