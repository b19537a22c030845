"""The real backend: PyTorch CUDA, imported lazily so PyTorch stays an optional dependency.

Every CUDA call of a device runs in that device's thread; a ``RuntimeError`` from torch (CUDA
errors, out of memory) becomes ``DeviceError`` with torch's text, so that GPU fails alone.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from gpuguard.agent.burnin import hardware, timing
from gpuguard.catalog import gpu_models

MATMULS_PER_STEP = 10
MEMORY_CHUNK_BYTES = 1 << 30
WORD_PATTERNS = (0x00000000, -1, -0x55555556, 0x55555555)  # 0x0…, 0xF…, 0xA…, 0x5… as int32


def load() -> TorchCudaBackend:
    """The CUDA backend; BackendUnavailable naming what is missing (PyTorch, CUDA, GPUs)."""
    if importlib.util.find_spec("torch") is None:
        raise hardware.BackendUnavailable(
            "--device cuda needs PyTorch with CUDA (pip install torch); it is not installed"
        )
    torch = importlib.import_module("torch")
    if not torch.cuda.is_available():
        raise hardware.BackendUnavailable(
            f"--device cuda: PyTorch {torch.__version__} sees no usable CUDA device "
            f"(CUDA build: {torch.version.cuda or 'none'}); check the driver and device plugin"
        )
    return TorchCudaBackend(torch)


class TorchCudaBackend:
    kind = "cuda"

    def __init__(self, torch: Any) -> None:
        self._torch = torch

    def devices(self) -> list[hardware.DeviceInfo]:
        try:
            return [self._describe(index) for index in range(self._torch.cuda.device_count())]
        except RuntimeError as e:
            raise hardware.BackendUnavailable(f"cannot list CUDA devices: {e}") from e

    def _describe(self, index: int) -> hardware.DeviceInfo:
        properties = self._torch.cuda.get_device_properties(index)
        uuid = getattr(properties, "uuid", None)
        return hardware.DeviceInfo(index, properties.name, f"GPU-{uuid}" if uuid else None)

    def matmul_tflops(
        self, device: hardware.DeviceInfo, size: int, dtype: gpu_models.Dtype, duration_s: float
    ) -> float:
        try:
            return self._matmul_tflops(device.index, size, dtype, duration_s)
        except RuntimeError as e:
            raise hardware.DeviceError(f"{type(e).__name__}: {e}") from e

    def _matmul_tflops(
        self, index: int, size: int, dtype: gpu_models.Dtype, duration_s: float
    ) -> float:
        torch = self._torch
        torch.cuda.set_device(index)  # per thread: cuBLAS handles and streams of this GPU
        cuda = torch.device("cuda", index)
        torch_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype.value]
        a = torch.randn(size, size, device=cuda, dtype=torch_dtype)
        b = torch.randn(size, size, device=cuda, dtype=torch_dtype)
        out = torch.empty(size, size, device=cuda, dtype=torch_dtype)

        def step() -> None:
            for _ in range(MATMULS_PER_STEP):
                torch.matmul(a, b, out=out)

        run = timing.time_steps(step, lambda: torch.cuda.synchronize(cuda), duration_s)
        return timing.matmul_tflops(size, run.steps * MATMULS_PER_STEP, run.seconds)

    def pattern_errors(self, device: hardware.DeviceInfo, fraction: float) -> int:
        try:
            return self._pattern_errors(device.index, fraction)
        except RuntimeError as e:
            raise hardware.DeviceError(f"{type(e).__name__}: {e}") from e

    def _pattern_errors(self, index: int, fraction: float) -> int:
        torch = self._torch
        torch.cuda.set_device(index)
        cuda = torch.device("cuda", index)
        ramp = torch.arange(MEMORY_CHUNK_BYTES // 4, device=cuda, dtype=torch.int32)
        free_bytes, _ = torch.cuda.mem_get_info(cuda)
        chunks = self._allocate(cuda, int(free_bytes * fraction))
        if not chunks:
            raise hardware.DeviceError(f"no memory to test: {free_bytes} B free")
        mismatches = 0
        for chunk in chunks:
            for pattern in WORD_PATTERNS:
                chunk.fill_(pattern)
                mismatches += int((chunk != pattern).sum().item())
            chunk.copy_(ramp)
            mismatches += int((chunk != ramp).sum().item())
        torch.cuda.synchronize(cuda)
        return mismatches

    def _allocate(self, cuda: Any, total_bytes: int) -> list[Any]:
        """int32 chunks up to ``total_bytes``; stops early (not an error) when memory runs out."""
        torch = self._torch
        chunks: list[Any] = []
        while total_bytes >= MEMORY_CHUNK_BYTES:
            try:
                chunks.append(torch.empty(MEMORY_CHUNK_BYTES // 4, device=cuda, dtype=torch.int32))
            except torch.cuda.OutOfMemoryError:
                break
            total_bytes -= MEMORY_CHUNK_BYTES
        return chunks
