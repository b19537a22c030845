"""What a GPU held by a pod really does over a window (docs/design.md#what-utilisation-means).

GPU util is the share of time *a* kernel ran; it says nothing about efficiency. The seed's
table reads the deeper DCGM profiling fields instead: SM occupancy low → occupancy problem;
tensor pipe low while busy → FP32 / unaligned shapes / precision; DRAM high with tensor low →
memory bound. One class per GPU, first match wins:

1. ``idle-expensive`` — util stayed under ``idle_util_pct`` for the whole window (at least
   ``idle_window_min``): a GPU paid for and unused (the GpuIdleExpensive rule's 1 %).
2. ``lightly-used`` — average util under ``busy_util_pct`` (80 %): not busy enough to judge.
3. ``profiling-metrics-missing`` — busy, but no DCGM_FI_PROF_* series: unknown, never guessed.
4. ``memory-bound`` — average DRAM active >= 0.5 and tensor active < 0.1.
5. ``low-occupancy`` — average SM occupancy < 0.2.
6. ``tensor-idle`` — average tensor active < 0.1.
7. ``healthy-busy`` — otherwise.

The seed gives the relations, not numbers; the thresholds are gpuguard's defaults (settings
``utilization.*``), chosen against NVIDIA's DCGM profiling-metric guidance (an SM activity
near 1 with occupancy under ~0.2 leaves most warp slots empty; tensor activity under ~0.1 on
a dense training job means the tensor cores are barely fed; DRAM activity over ~0.5 is a
memory-bandwidth-heavy kernel) and tuned so the simulator's training shape is healthy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from gpuguard.model import decisions, fleet
from gpuguard.model import metric_names as names
from gpuguard.model import settings as settings_model

KIND = "utilization"
Reason = decisions.Reason

HINTS: dict[Reason, str] = {
    Reason.IDLE_EXPENSIVE: "allocated but idle the whole window: release it (notebook, stuck "
    "or finished job still holding the GPU)",
    Reason.LIGHTLY_USED: "kernels run part of the time: input pipeline, CPU-bound data "
    "loading or waiting on communication",
    Reason.PROFILING_METRICS_MISSING: "unknown — enable DCGM_FI_PROF_* in dcgm-exporter "
    "(SM active, occupancy, tensor, DRAM); util alone is never efficiency",
    Reason.MEMORY_BOUND: "memory bound: DRAM busy, tensor cores starved — fuse kernels, raise "
    "arithmetic intensity (batch, fused attention)",
    Reason.LOW_OCCUPANCY: "few warps resident per SM: small batch or grid, register/shared "
    "memory pressure — see Nsight Compute's occupancy section",
    Reason.TENSOR_IDLE: "busy but tensor cores idle: FP32 instead of BF16/FP16/TF32 (enable "
    "AMP), matrix shapes not multiples of 8/16",
    Reason.HEALTHY_BUSY: "busy and feeding the tensor cores",
}


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """One GPU's class over the window, the averages it rests on, and what to do."""

    finding: decisions.Finding
    node: str
    gpu: str
    pods: tuple[str, ...]
    util_avg: float | None
    sm_active: float | None
    sm_occupancy: float | None
    tensor_active: float | None
    dram_active: float | None

    @property
    def reason(self) -> decisions.Reason:
        return self.finding.reason

    @property
    def hint(self) -> str:
        return HINTS[self.finding.reason]


def diagnose(
    windows: Sequence[fleet.GpuWindow],
    settings: settings_model.UtilizationSettings,
    window: timedelta,
) -> tuple[Diagnosis, ...]:
    """A diagnosis for every GPU a pod held in the window (others are phantom's business)."""
    return tuple(_diagnosis(w, settings, window) for w in windows if w.pods)


def classify(
    w: fleet.GpuWindow, settings: settings_model.UtilizationSettings, window: timedelta
) -> Reason:
    util_max = w.stat(names.DCGM_GPU_UTIL, "max")
    util_avg = w.stat(names.DCGM_GPU_UTIL, "avg")
    if util_max is None or util_avg is None:
        return Reason.PROFILING_METRICS_MISSING
    if util_max < settings.idle_util_pct and window >= settings.idle_window_min:
        return Reason.IDLE_EXPENSIVE
    if util_avg < settings.busy_util_pct:
        return Reason.LIGHTLY_USED
    return _busy_class(w, settings)


def _busy_class(w: fleet.GpuWindow, settings: settings_model.UtilizationSettings) -> Reason:
    occupancy = w.stat(names.DCGM_SM_OCCUPANCY, "avg")
    tensor = w.stat(names.DCGM_TENSOR_ACTIVE, "avg")
    dram = w.stat(names.DCGM_DRAM_ACTIVE, "avg")
    if occupancy is None or tensor is None or dram is None:
        return Reason.PROFILING_METRICS_MISSING
    if dram >= settings.dram_active_high and tensor < settings.tensor_active_low:
        return Reason.MEMORY_BOUND
    if occupancy < settings.sm_occupancy_low:
        return Reason.LOW_OCCUPANCY
    if tensor < settings.tensor_active_low:
        return Reason.TENSOR_IDLE
    return Reason.HEALTHY_BUSY


def _diagnosis(
    w: fleet.GpuWindow, settings: settings_model.UtilizationSettings, window: timedelta
) -> Diagnosis:
    reason = classify(w, settings, window)
    averages = {
        "util %": w.stat(names.DCGM_GPU_UTIL, "avg"),
        "SM active": w.stat(names.DCGM_SM_ACTIVE, "avg"),
        "SM occupancy": w.stat(names.DCGM_SM_OCCUPANCY, "avg"),
        "tensor active": w.stat(names.DCGM_TENSOR_ACTIVE, "avg"),
        "DRAM active": w.stat(names.DCGM_DRAM_ACTIVE, "avg"),
    }
    labels = {"node": w.node, "gpu": w.gpu, "UUID": w.uuid}
    evidence = tuple(
        decisions.Evidence(source=f"avg {name}", value=_num(value), labels=labels)
        for name, value in averages.items()
    )
    finding = decisions.Finding(
        kind=KIND,
        node=w.node,
        reason=reason,
        gpu=w.gpu,
        evidence=evidence,
        detail=f"{', '.join(w.pods)}: {reason} — {HINTS[reason]}",
    )
    return Diagnosis(
        finding=finding,
        node=w.node,
        gpu=w.gpu,
        pods=w.pods,
        util_avg=averages["util %"],
        sm_active=averages["SM active"],
        sm_occupancy=averages["SM occupancy"],
        tensor_active=averages["tensor active"],
        dram_active=averages["DRAM active"],
    )


def _num(value: float | None) -> str:
    return "missing" if value is None else f"{value:.3g}"
