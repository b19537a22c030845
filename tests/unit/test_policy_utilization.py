"""What busy GPUs really do (docs/design.md#what-utilisation-means): util is never called
efficiency."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gpuguard.model import decisions, fleet
from gpuguard.model import metric_names as mn
from gpuguard.model import settings as settings_model
from gpuguard.policy import utilization

Reason = decisions.Reason
SETTINGS = settings_model.UtilizationSettings()
HOUR = timedelta(hours=1)


def held(pods: tuple[str, ...] = ("ml/train-0",), **averages: float) -> fleet.GpuWindow:
    """A GPU held by ``pods`` whose fields averaged ``averages`` (util also its max)."""
    named = {getattr(mn, k): v for k, v in averages.items()}
    stats = {mn.window_stat(m, "avg"): v for m, v in named.items()}
    if mn.DCGM_GPU_UTIL in named:
        stats[mn.window_stat(mn.DCGM_GPU_UTIL, "max")] = named[mn.DCGM_GPU_UTIL]
    return fleet.GpuWindow("gpu-node-1", "3", "GPU-3", "NVIDIA H100 80GB HBM3", stats, pods)


def profiled(util: float, occupancy: float, tensor: float, dram: float) -> fleet.GpuWindow:
    return held(
        DCGM_GPU_UTIL=util,
        DCGM_SM_ACTIVE=0.9,
        DCGM_SM_OCCUPANCY=occupancy,
        DCGM_TENSOR_ACTIVE=tensor,
        DCGM_DRAM_ACTIVE=dram,
    )


CASES = [
    pytest.param(profiled(98, 0.48, 0.6, 0.4), HOUR, Reason.HEALTHY_BUSY, id="bf16-training"),
    pytest.param(profiled(97, 0.45, 0.02, 0.2), HOUR, Reason.TENSOR_IDLE, id="fp32-util-90-trap"),
    pytest.param(profiled(99, 0.5, 0.05, 0.7), HOUR, Reason.MEMORY_BOUND, id="dram-bound"),
    pytest.param(
        profiled(100, 0.04, 0.0, 0.01), HOUR, Reason.LOW_OCCUPANCY, id="small-compute-kernel"
    ),
    pytest.param(held(DCGM_GPU_UTIL=0.0), 3 * HOUR, Reason.IDLE_EXPENSIVE, id="idle-notebook-3h"),
    pytest.param(
        held(DCGM_GPU_UTIL=0.0), timedelta(minutes=10), Reason.LIGHTLY_USED, id="short-pause"
    ),
    pytest.param(profiled(40, 0.5, 0.5, 0.3), HOUR, Reason.LIGHTLY_USED, id="input-bound"),
    pytest.param(
        held(DCGM_GPU_UTIL=99.0), HOUR, Reason.PROFILING_METRICS_MISSING, id="no-dcgm-prof"
    ),
    pytest.param(held(), HOUR, Reason.PROFILING_METRICS_MISSING, id="no-telemetry-at-all"),
]


@pytest.mark.parametrize(("gpu_window", "window", "expected"), CASES)
def test_each_gpu_gets_one_class(
    gpu_window: fleet.GpuWindow, window: timedelta, expected: decisions.Reason
) -> None:
    (diagnosis,) = utilization.diagnose([gpu_window], SETTINGS, window)
    assert diagnosis.reason is expected
    assert diagnosis.finding.kind == "utilization"
    assert diagnosis.hint in diagnosis.finding.detail


def test_missing_profiling_says_how_to_enable_it_rather_than_guess() -> None:
    (diagnosis,) = utilization.diagnose([held(DCGM_GPU_UTIL=99.0)], SETTINGS, HOUR)
    assert "enable DCGM_FI_PROF_*" in diagnosis.hint
    assert diagnosis.tensor_active is None


def test_gpus_without_a_pod_are_not_diagnosed() -> None:
    assert utilization.diagnose([held(pods=(), DCGM_GPU_UTIL=100.0)], SETTINGS, HOUR) == ()
