"""The PyTorch CUDA backend without PyTorch: a stand-in ``torch`` checks that devices are named
as nvidia-smi names them and that a CUDA error becomes that GPU's DeviceError."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace
from typing import Any

import pytest

from gpuguard.agent.burnin import cuda, hardware
from gpuguard.catalog import gpu_models

ECC = "CUDA error: uncorrectable ECC error encountered"


def fake_torch(*, fail_on: int | None = None) -> Any:
    def randn(*_: int, device: Any, dtype: Any) -> object:
        if device.index == fail_on:
            raise RuntimeError(ECC)
        return object()

    properties = [
        SimpleNamespace(name="NVIDIA H200", uuid="58d2a4c1-0000-4000-8000-000000000001"),
        SimpleNamespace(name="NVIDIA H200", uuid=None),
    ]
    return SimpleNamespace(
        cuda=SimpleNamespace(
            device_count=lambda: len(properties),
            get_device_properties=lambda index: properties[index],
            set_device=lambda index: None,
            synchronize=lambda device: None,
        ),
        device=lambda kind, index: SimpleNamespace(type=kind, index=index),
        float16="float16",
        bfloat16="bfloat16",
        randn=randn,
        empty=lambda *_, **__: object(),
        matmul=lambda a, b, out: out,
    )


def test_devices_are_named_and_carry_the_nvidia_smi_uuid() -> None:
    devices = cuda.TorchCudaBackend(fake_torch()).devices()
    assert devices == [
        hardware.DeviceInfo(0, "NVIDIA H200", "GPU-58d2a4c1-0000-4000-8000-000000000001"),
        hardware.DeviceInfo(1, "NVIDIA H200", None),
    ]


def test_a_cuda_error_becomes_that_gpus_device_error_with_the_text() -> None:
    backend = cuda.TorchCudaBackend(fake_torch(fail_on=1))
    broken = backend.devices()[1]
    with pytest.raises(hardware.DeviceError, match="uncorrectable ECC error"):
        backend.matmul_tflops(broken, 64, gpu_models.Dtype.FP16, 0.01)


def test_a_healthy_device_is_timed_by_the_shared_loop() -> None:
    backend = cuda.TorchCudaBackend(fake_torch(fail_on=1))
    healthy = backend.devices()[0]
    assert backend.matmul_tflops(healthy, 64, gpu_models.Dtype.BF16, 0.01) > 0


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed")
def test_load_without_torch_says_how_to_install_it() -> None:
    with pytest.raises(hardware.BackendUnavailable, match="pip install torch"):
        cuda.load()
