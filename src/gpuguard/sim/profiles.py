"""Metric shapes: what dcgm-exporter reports for a GPU, given what runs on it.

The simulator needs believable telemetry for each kind of activity, because gpuguard's
diagnosis reads the *relations* between metrics (the telemetry notes [docs/design.md#incidents]:
util vs SM activity vs tensor vs DRAM; the phantom incident: phantom = util 100 %, 0 MiB, P0, clocks
at max, ~114 W, no process). A shape is a pure function of (activity, GPU model, GPU uuid, time):
values wobble a little around the profile's centre, seeded by a hash of uuid and the 15 s time
bucket, so renders are reproducible and tests can assert ranges.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from gpuguard.sim import state

_BUCKET_S = 15  # the wobble changes once per default scrape interval


class Activity(StrEnum):
    """What a GPU is doing, as far as its metrics can tell."""

    NONE = "none"  # no pod holds it
    IDLE_POD = "idle_pod"  # a pod holds it but runs no kernels (CUDA context only)
    TRAINING = "training"
    SMALL_COMPUTE = "small_compute"  # tiny compute-bound kernel: busy, no memory
    PHANTOM = "phantom"  # busy with nothing: util 100 %, 0 MiB, P0 (the phantom incident)


@dataclass(frozen=True)
class GpuSpec:
    """Per-model facts the shapes need. ``match`` is a substring of dcgm's modelName."""

    match: str
    fb_total_mib: int  # FB_USED + FB_FREE + FB_RESERVED
    fb_reserved_mib: int
    idle_power_w: float
    max_power_w: float  # board power limit (TDP)
    phantom_power_w: float  # centre of the phantom band (static power at P0 clocks)
    idle_sm_clock_mhz: int
    max_sm_clock_mhz: int
    idle_mem_clock_mhz: int
    max_mem_clock_mhz: int


# Most specific first: spec_for() takes the first whose ``match`` is in the model name.
SPECS: tuple[GpuSpec, ...] = (
    # The phantom incident (the phantom incident, 8x RTX 5090 per node): idle P8 3-23 W (~15 W),
    # phantom 108-127 W (~114 W), clocks 210/405 MHz idle, 2940/14001 MHz max. 575 W and 32 GiB are
    # NVIDIA's published board power and memory; reserved FB is an assumption.
    GpuSpec("RTX 5090", 32607, 500, 15.0, 575.0, 117.5, 210, 2940, 405, 14001),
    # H200 SXM: 700 W and 141 GB (143771 MiB as nvidia-smi shows it) from NVIDIA's datasheet;
    # max clocks as H100 SXM; idle ~75 W and phantom ~140 W are assumptions (HBM idles high).
    GpuSpec("H200", 143771, 600, 75.0, 700.0, 140.0, 345, 1980, 3201, 3201),
    # H100 SXM5 80GB: 700 W, 81559 MiB, 1980 MHz SM / 2619 MHz HBM3 (datasheet / nvidia-smi -q);
    # idle ~70 W is the commonly reported figure; phantom ~140 W an assumption.
    GpuSpec("H100", 81559, 600, 70.0, 700.0, 140.0, 345, 1980, 2619, 2619),
    # A100 SXM4 80GB: 400 W, 81920 MiB, 1410 MHz SM / 1593 MHz HBM2e (datasheet); idle ~55 W
    # and phantom ~90 W are assumptions.
    GpuSpec("A100", 81920, 600, 55.0, 400.0, 90.0, 210, 1410, 1593, 1593),
    # L40S: idle 35.7 W, 210/405 MHz idle clocks and 45459 + 608 MiB from the real dcgm-exporter
    # sample (tests/data/reference/dcgm_exporter_sample_metrics.txt, sample 3); 350 W,
    # 2520/9001 MHz max from NVIDIA's datasheet; phantom ~95 W an assumption.
    GpuSpec("L40S", 46067, 608, 35.7, 350.0, 95.0, 210, 2520, 405, 9001),
    # L4: idle 16.4 W, 210/405 MHz idle and 22563 + 470 MiB from the real sample (sample 2);
    # 72 W, 2040/6251 MHz max from the datasheet; phantom ~35 W an assumption.
    GpuSpec("L4", 23033, 470, 16.4, 72.0, 35.0, 210, 2040, 405, 6251),
)
# Anything else: a mid-range datacenter card, every number an assumption.
GENERIC = GpuSpec("", 49152, 512, 30.0, 300.0, 90.0, 210, 2000, 405, 8000)


@dataclass(frozen=True)
class Shape:
    """One GPU's dcgm values at one instant."""

    util_pct: float
    sm_active: float
    sm_occupancy: float
    tensor_active: float
    dram_active: float
    gr_engine_active: float
    fb_used_mib: float
    power_w: float
    sm_clock_mhz: float
    mem_clock_mhz: float
    pstate: int
    temp_c: float


def spec_for(model: str) -> GpuSpec:
    """The spec whose ``match`` occurs in ``model`` (case-insensitive), else GENERIC."""
    lowered = model.lower()
    return next((s for s in SPECS if s.match.lower() in lowered), GENERIC)


def activity_of(gpu: state.SimGpu, workload: state.Workload | None) -> Activity:
    """Phantom wins (the GPU is stuck whatever is scheduled), then the pod's profile."""
    if gpu.phantom:
        return Activity.PHANTOM
    if workload is None:
        return Activity.NONE
    return {
        state.WorkloadProfile.TRAINING: Activity.TRAINING,
        state.WorkloadProfile.SMALL_COMPUTE: Activity.SMALL_COMPUTE,
        state.WorkloadProfile.IDLE: Activity.IDLE_POD,
    }[workload.profile]


def wobble(seed: str, key: str, now: datetime) -> float:
    """A reproducible number in [0, 1) for (seed, key, 15 s bucket of now)."""
    bucket = int(now.timestamp()) // _BUCKET_S
    digest = hashlib.blake2b(f"{seed}|{key}|{bucket}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def constant(seed: str, key: str) -> float:
    """A reproducible number in [0, 1) that does not change with time (per-card traits)."""
    digest = hashlib.blake2b(f"{seed}|{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def shape(activity: Activity, spec: GpuSpec, seed: str, now: datetime) -> Shape:
    """The values for ``activity`` on a ``spec`` card; ``seed`` is the GPU's uuid."""
    return _SHAPERS[activity](spec, seed, now)


def _between(low: float, high: float, seed: str, key: str, now: datetime) -> float:
    return low + (high - low) * wobble(seed, key, now)


def _none(spec: GpuSpec, seed: str, now: datetime) -> Shape:
    power = spec.idle_power_w * (0.9 + 0.2 * wobble(seed, "power", now))
    return Shape(
        util_pct=0, sm_active=0, sm_occupancy=0, tensor_active=0,
        dram_active=0, gr_engine_active=0, fb_used_mib=0, power_w=round(power, 3),
        sm_clock_mhz=spec.idle_sm_clock_mhz, mem_clock_mhz=spec.idle_mem_clock_mhz,
        pstate=8, temp_c=round(_between(29, 34, seed, "temp", now)),
    )  # fmt: skip


def _idle_pod(spec: GpuSpec, seed: str, now: datetime) -> Shape:
    power = spec.idle_power_w * (1.05 + 0.15 * wobble(seed, "power", now))
    return Shape(
        util_pct=0, sm_active=0, sm_occupancy=0, tensor_active=0,
        dram_active=round(_between(0, 0.002, seed, "dram", now), 6), gr_engine_active=0,
        fb_used_mib=round(_between(400, 600, seed, "fb", now)), power_w=round(power, 3),
        sm_clock_mhz=spec.idle_sm_clock_mhz, mem_clock_mhz=spec.idle_mem_clock_mhz,
        pstate=8, temp_c=round(_between(31, 36, seed, "temp", now)),
    )  # fmt: skip


def _training(spec: GpuSpec, seed: str, now: datetime) -> Shape:
    fb = spec.fb_total_mib - spec.fb_reserved_mib
    return Shape(
        util_pct=round(_between(95, 100, seed, "util", now)),
        sm_active=round(_between(0.86, 0.94, seed, "sm", now), 6),
        sm_occupancy=round(_between(0.40, 0.55, seed, "occ", now), 6),
        tensor_active=round(_between(0.50, 0.70, seed, "tensor", now), 6),
        dram_active=round(_between(0.35, 0.45, seed, "dram", now), 6),
        gr_engine_active=round(_between(0.95, 1.0, seed, "gr", now), 6),
        fb_used_mib=round(fb * _between(0.70, 0.90, seed, "fb", now)),
        power_w=round(spec.max_power_w * _between(0.85, 0.98, seed, "power", now), 3),
        sm_clock_mhz=round(spec.max_sm_clock_mhz * _between(0.93, 1.0, seed, "smclk", now)),
        mem_clock_mhz=spec.max_mem_clock_mhz, pstate=0,
        temp_c=round(_between(64, 74, seed, "temp", now)),
    )  # fmt: skip


def _small_compute(spec: GpuSpec, seed: str, now: datetime) -> Shape:
    span = spec.max_power_w - spec.idle_power_w
    return Shape(
        util_pct=100, sm_active=round(_between(0.97, 0.99, seed, "sm", now), 6),
        sm_occupancy=round(_between(0.02, 0.06, seed, "occ", now), 6), tensor_active=0,
        dram_active=round(_between(0.005, 0.015, seed, "dram", now), 6),
        gr_engine_active=round(_between(0.97, 1.0, seed, "gr", now), 6),
        fb_used_mib=round(_between(45, 55, seed, "fb", now)),
        power_w=round(spec.idle_power_w + span * _between(0.2, 0.3, seed, "power", now), 3),
        sm_clock_mhz=spec.max_sm_clock_mhz, mem_clock_mhz=spec.max_mem_clock_mhz, pstate=0,
        temp_c=round(_between(45, 55, seed, "temp", now)),
    )  # fmt: skip


def _phantom(spec: GpuSpec, seed: str, now: datetime) -> Shape:
    # The phantom incident: each phantom card holds its own level (108-127 W around ~117 W) and
    # barely moves.
    level = spec.phantom_power_w - 9.5 + 19.0 * constant(seed, "phantom-power")
    return Shape(
        util_pct=100, sm_active=round(_between(0.985, 0.995, seed, "sm", now), 6),
        sm_occupancy=round(_between(0.0, 0.01, seed, "occ", now), 6), tensor_active=0,
        dram_active=0, gr_engine_active=round(_between(0.98, 1.0, seed, "gr", now), 6),
        fb_used_mib=0, power_w=round(level + _between(-0.5, 0.5, seed, "power", now), 3),
        sm_clock_mhz=spec.max_sm_clock_mhz, mem_clock_mhz=spec.max_mem_clock_mhz, pstate=0,
        temp_c=round(_between(40, 46, seed, "temp", now)),
    )  # fmt: skip


_SHAPERS = {
    Activity.NONE: _none,
    Activity.IDLE_POD: _idle_pod,
    Activity.TRAINING: _training,
    Activity.SMALL_COMPUTE: _small_compute,
    Activity.PHANTOM: _phantom,
}
