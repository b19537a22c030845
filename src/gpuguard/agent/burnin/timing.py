"""The one timing loop every backend uses: warm up, synchronise, then time whole steps.

A step enqueues work (e.g. a batch of matmuls); ``synchronize`` waits for the device, so the
clock measures finished work, not queued work. Warm-up steps (allocation, kernel selection,
clock ramp) are excluded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

WARMUP_STEPS = 3


@dataclass(frozen=True, slots=True)
class Timing:
    steps: int
    seconds: float


def time_steps(
    step: Callable[[], None],
    synchronize: Callable[[], None],
    duration_s: float,
    *,
    warmup_steps: int = WARMUP_STEPS,
    clock: Callable[[], float] = time.perf_counter,
) -> Timing:
    """Run ``step`` until ``duration_s`` has passed (at least once), timing only after warm-up."""
    for _ in range(warmup_steps):
        step()
    synchronize()
    started = clock()
    steps = 0
    while True:
        step()
        synchronize()
        steps += 1
        elapsed = clock() - started
        if elapsed >= duration_s:
            return Timing(steps, elapsed)


def matmul_tflops(size: int, matmuls: int, seconds: float) -> float:
    """TFLOPS of ``matmuls`` square matmuls of side ``size`` (2·n³ flops each) in ``seconds``."""
    if seconds <= 0:
        return 0.0
    return 2.0 * size**3 * matmuls / seconds / 1e12
