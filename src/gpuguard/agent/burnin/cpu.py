"""A CPU backend for tests only: a small pure-Python matmul and a bytearray pattern test.

It exercises the shared timing, threading, error capture and evaluation without a GPU or
PyTorch. Its numbers say nothing about any GPU, and no packaged model matches its name, so a
CPU run can never pass a burn-in.
"""

from __future__ import annotations

from gpuguard.agent.burnin import hardware, timing
from gpuguard.catalog import gpu_models

CPU_NAME = "CPU (pure-Python matmul, not a GPU)"
PATTERN_BYTES = 1 << 20
PATTERNS = (0x00, 0xFF, 0xAA, 0x55)


class CpuBackend:
    kind = "cpu"

    def devices(self) -> list[hardware.DeviceInfo]:
        return [hardware.DeviceInfo(0, CPU_NAME)]

    def matmul_tflops(
        self, device: hardware.DeviceInfo, size: int, dtype: gpu_models.Dtype, duration_s: float
    ) -> float:
        a = [[float((i * size + j) % 7) for j in range(size)] for i in range(size)]
        b = [[float((i + 2 * j) % 5) for j in range(size)] for i in range(size)]

        def step() -> None:
            _matmul(a, b)

        run = timing.time_steps(step, lambda: None, duration_s, warmup_steps=1)
        return timing.matmul_tflops(size, run.steps, run.seconds)

    def pattern_errors(self, device: hardware.DeviceInfo, fraction: float) -> int:
        length = max(1, int(PATTERN_BYTES * fraction))
        mismatches = 0
        for pattern in PATTERNS:
            buffer = bytearray([pattern]) * length
            mismatches += length - buffer.count(pattern)
        return mismatches


def _matmul(a: list[list[float]], b: list[list[float]]) -> list[list[float]]:
    columns = list(zip(*b, strict=True))
    return [[sum(x * y for x, y in zip(row, col, strict=True)) for col in columns] for row in a]
