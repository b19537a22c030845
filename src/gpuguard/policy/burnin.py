"""Pass or fail of a burn-in, as a pure function of what each GPU measured.

The return to pool (docs/design.md#return-to-pool): every GPU present, no error, min/max throughput
>= 0.8. Its own list of gaps says a ratio between cards passes a node that is slow as a whole, so
each card must also reach a floor fraction of its model's expected throughput (the packaged table);
a model the table does not know makes that check UNKNOWN, never PASS. Memory-class Xids get a
memory test instead of a matmul (the seed's 5th ECC fault passed the matmul, failed memtest).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from gpuguard.catalog import gpu_models
from gpuguard.errors import InputError
from gpuguard.model import decisions

SEED_MIN_MAX_RATIO = 0.8
DEFAULT_FLOOR = 0.7
MEMORY_FAULT_XIDS: frozenset[int] = frozenset({48, 63, 64, 94, 95, 140})
"""DBE, page retirement event/failure, contained/uncontained ECC, ECC escape: test the memory."""

PASS, FAIL, UNKNOWN = (
    decisions.CheckStatus.PASS,
    decisions.CheckStatus.FAIL,
    decisions.CheckStatus.UNKNOWN,
)


class Mode(StrEnum):
    MATMUL = "matmul"
    MEMORY = "memory"
    AUTO = "auto"


@dataclass(frozen=True, slots=True)
class GpuResult:
    """What one GPU did: its TFLOPS (None when it did not finish) or the error it raised."""

    index: int
    name: str
    uuid: str | None = None
    tflops: float | None = None
    error: str | None = None

    @property
    def measured(self) -> bool:
        return self.error is None and self.tflops is not None

    def label(self) -> str:
        return f"GPU {self.index} ({self.name})"


@dataclass(frozen=True, slots=True)
class BurninCheck:
    check: str
    status: decisions.CheckStatus
    evidence: str


@dataclass(frozen=True, slots=True)
class BurninVerdict:
    """Passed only when every check is PASS; UNKNOWN is never a pass."""

    checks: tuple[BurninCheck, ...]

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(check.status is PASS for check in self.checks)


def parse_reason(reason: str | None) -> int | None:
    """The Xid of an isolation reason such as ``xid-48`` (None when no reason is given)."""
    if reason is None:
        return None
    match = re.fullmatch(r"\s*xid[-_ ]?(\d{1,3})\s*", reason, flags=re.IGNORECASE)
    if match is None:
        raise InputError(f"--reason: expected xid-NN (e.g. xid-48), got {reason!r}")
    return int(match.group(1))


def choose_mode(requested: Mode, xid: int | None) -> Mode:
    """``auto``: a memory test for memory-class Xids, the matmul for everything else."""
    if requested is not Mode.AUTO:
        return requested
    return Mode.MEMORY if xid in MEMORY_FAULT_XIDS else Mode.MATMUL


def evaluate(
    results: Sequence[GpuResult],
    expected_gpus: int | None,
    table: gpu_models.GpuModelTable,
    floor: float,
    min_max: float = SEED_MIN_MAX_RATIO,
    *,
    dtype: gpu_models.Dtype,
) -> BurninVerdict:
    """The matmul burn-in's verdict: count, errors, balance between cards, floor per model."""
    return BurninVerdict(
        (
            count_check(len(results), expected_gpus),
            errors_check(results),
            balance_check(results, min_max),
            floor_check(results, table, floor, dtype),
        )
    )


def evaluate_memory(
    found_gpus: int | None,
    expected_gpus: int | None,
    results: Sequence[GpuResult],
    memory_test: BurninCheck,
) -> BurninVerdict:
    """The memory burn-in's verdict: count, per-GPU errors (when run per GPU), the memory test.

    ``results`` is empty when the test ran node-wide (dcgmi): its own check carries the errors.
    """
    checks = [count_check(found_gpus, expected_gpus)]
    if results:
        checks.append(errors_check(results))
    return BurninVerdict((*checks, memory_test))


def count_check(found: int | None, expected_gpus: int | None) -> BurninCheck:
    if found is None:
        wanted = "none" if expected_gpus is None else str(expected_gpus)
        return BurninCheck("gpu-count", UNKNOWN, f"GPUs could not be counted; expected {wanted}")
    if expected_gpus is None:
        evidence = f"found {_gpus(found)}; no expected count given (--expected-gpus)"
        return BurninCheck("gpu-count", UNKNOWN, evidence)
    status = PASS if found == expected_gpus else FAIL
    return BurninCheck("gpu-count", status, f"found {found} of {expected_gpus} expected GPUs")


def errors_check(results: Sequence[GpuResult]) -> BurninCheck:
    failed = [r for r in results if r.error is not None]
    if failed:
        evidence = "; ".join(f"{r.label()}: {r.error}" for r in failed)
        return BurninCheck("gpu-errors", FAIL, evidence)
    if not results:
        return BurninCheck("gpu-errors", UNKNOWN, "no GPU ran")
    return BurninCheck("gpu-errors", PASS, f"{_gpus(len(results))} ran without error")


def min_max_ratio(results: Sequence[GpuResult]) -> float | None:
    """Slowest over fastest measured GPU; None when nothing was measured."""
    values = [r.tflops for r in results if r.measured and r.tflops is not None]
    if not values or max(values) <= 0:
        return None
    return min(values) / max(values)


def balance_check(results: Sequence[GpuResult], min_max: float) -> BurninCheck:
    measured = [r for r in results if r.measured]
    ratio = min_max_ratio(measured)
    if ratio is None:
        return BurninCheck("throughput-balance", UNKNOWN, "no GPU measured a throughput")
    slowest = min(measured, key=_tflops)
    fastest = max(measured, key=_tflops)
    evidence = (
        f"min/max {ratio:.2f} (needs >= {min_max:.2f}): slowest {slowest.label()} "
        f"{_tflops(slowest):.1f} TFLOPS, fastest {fastest.label()} {_tflops(fastest):.1f}"
    )
    return BurninCheck("throughput-balance", PASS if ratio >= min_max else FAIL, evidence)


def fraction_of_expected(
    result: GpuResult, table: gpu_models.GpuModelTable, dtype: gpu_models.Dtype
) -> float | None:
    """Measured over the model's expected dense TFLOPS; None when either is unknown."""
    expected = table.expected(result.name, dtype)
    if expected is None or not result.measured:
        return None
    return _tflops(result) / expected


def floor_check(
    results: Sequence[GpuResult],
    table: gpu_models.GpuModelTable,
    floor: float,
    dtype: gpu_models.Dtype,
) -> BurninCheck:
    measured = [r for r in results if r.measured]
    fractions = {r.index: fraction_of_expected(r, table, dtype) for r in measured}
    below = [r for r in measured if (f := fractions[r.index]) is not None and f < floor]
    unknown = sorted({r.name for r in measured if fractions[r.index] is None})
    if below:
        evidence = "; ".join(_floor_evidence(r, table, dtype, floor) for r in below)
        return BurninCheck("throughput-floor", FAIL, evidence)
    if unknown:
        names = ", ".join(repr(name) for name in unknown)
        evidence = f"no expected {dtype} throughput in the packaged table for {names}"
        return BurninCheck("throughput-floor", UNKNOWN, evidence)
    if not measured:
        return BurninCheck("throughput-floor", UNKNOWN, "no GPU measured a throughput")
    lowest = min(measured, key=lambda r: fractions[r.index] or 0.0)
    evidence = f"every GPU >= {floor:.2f} of expected; lowest " + _floor_evidence(
        lowest, table, dtype, floor
    )
    return BurninCheck("throughput-floor", PASS, evidence)


def _floor_evidence(
    result: GpuResult,
    table: gpu_models.GpuModelTable,
    dtype: gpu_models.Dtype,
    floor: float,
) -> str:
    expected = table.expected(result.name, dtype) or 0.0
    fraction = fraction_of_expected(result, table, dtype) or 0.0
    return (
        f"{result.label()} {_tflops(result):.1f} TFLOPS = {fraction:.2f} of {expected:g} "
        f"expected {dtype} (floor {floor:.2f})"
    )


def _gpus(count: int) -> str:
    return f"{count} GPU" if count == 1 else f"{count} GPUs"


def _tflops(result: GpuResult) -> float:
    return result.tflops if result.tflops is not None else 0.0
