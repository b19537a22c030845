"""The device boundary of the burn-in: what a backend must offer, and the errors it raises.

The measuring loop, the timing, per-device error capture and the evaluation are shared; a
backend only lists its devices and runs one device's work. Tests use a fake backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from gpuguard.catalog import gpu_models
from gpuguard.errors import GpuguardError


class DeviceError(GpuguardError):
    """One device failed its work (a CUDA error, out of memory, a hang): that GPU fails."""


class BackendUnavailable(GpuguardError):
    """The requested backend cannot run here (no PyTorch, no CUDA, no GPU driver)."""


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    index: int
    name: str
    uuid: str | None = None


class DeviceBackend(Protocol):
    """A set of devices that can run a timed matmul."""

    kind: str  # "cuda" or "cpu": shown in the report

    def devices(self) -> list[DeviceInfo]:
        """Every visible device; raises BackendUnavailable when none can be listed."""
        ...

    def matmul_tflops(
        self, device: DeviceInfo, size: int, dtype: gpu_models.Dtype, duration_s: float
    ) -> float:
        """Measured TFLOPS of ``size``² matmuls for ``duration_s`` (warm-up excluded).

        Raises DeviceError with the device's error text.
        """
        ...


class MemoryTester(Protocol):
    def pattern_errors(self, device: DeviceInfo, fraction: float) -> int:
        """Write/read patterns over ``fraction`` of free memory; the count of mismatched words.

        Raises DeviceError when the test cannot run on that device.
        """
        ...


class DeviceKind(StrEnum):
    CUDA = "cuda"
    CPU = "cpu"  # tests only: never a burn-in result


class Backend(DeviceBackend, MemoryTester, Protocol):
    """What the burn-in needs of a backend: timed matmuls and a memory pattern test."""
