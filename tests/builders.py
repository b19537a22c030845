"""Builders and fakes more than one test module uses — here, never imported from a test module:
phantom-busy GPU windows and a phantom readings source; a fake GPU backend for the burn-in and
the real burn-in run over it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from gpuguard.agent.burnin import hardware, running
from gpuguard.catalog import gpu_models
from gpuguard.model import fleet
from gpuguard.model import metric_names as mn
from gpuguard.policy import burnin
from gpuguard.sources import gpu_metrics

# ---- phantom utilisation -----------------------------------------------------------------------

# gpu-node-1 GPU 5 in the phantom incident's dmon: SM 100 %, mem 0 %, 0 MiB, P0, 2940 MHz, 113 W.
PHANTOM_READINGS = {
    mn.DCGM_GPU_UTIL: 100.0,
    mn.DCGM_SM_ACTIVE: 0.99,
    mn.DCGM_GR_ENGINE_ACTIVE: 0.99,
    mn.DCGM_DRAM_ACTIVE: 0.0,
    mn.DCGM_FB_USED: 0.0,
    mn.DCGM_PSTATE: 0.0,
    mn.DCGM_SM_CLOCK: 2940.0,
    mn.DCGM_POWER: 113.0,
}


def stats(values: Mapping[str, float]) -> dict[str, float]:
    return {mn.window_stat(m, s): v for m, v in values.items() for s in mn.WINDOW_STATS}


def window(gpu: str = "5", **changes: object) -> fleet.GpuWindow:
    base = fleet.GpuWindow(
        node="gpu-node-1",
        gpu=gpu,
        uuid=f"GPU-{gpu}",
        model="NVIDIA GeForce RTX 5090",
        stats=stats(PHANTOM_READINGS),
        node_gpu_pods=0,
        seen_at_start=True,
    )
    return replace(base, **changes)  # type: ignore[arg-type]



@dataclass
class PhantomSource:
    """A ``gpu_metrics`` readings source: fixed windows, an error to raise, calls recorded."""

    windows_seen: tuple[fleet.GpuWindow, ...] = ()
    error: Exception | None = None
    asked: list[datetime] = field(default_factory=list)
    processes: Mapping[str, int] | None = None

    def readings(self, at: datetime) -> gpu_metrics.GpuReadings:
        self.asked.append(at)
        if self.error:
            raise self.error
        return gpu_metrics.GpuReadings(self.windows_seen, self.processes)



# ---- burn-in -----------------------------------------------------------------------------------

H100 = "NVIDIA H100 80GB HBM3"
HEALTHY = 740.0



@dataclass
class FakeBackend:
    """A node of GPUs: per-index TFLOPS, errors and memory mismatches; records each call."""

    tflops: Sequence[float]
    name: str = H100
    errors: dict[int, str] = field(default_factory=dict)
    mismatches: dict[int, int] = field(default_factory=dict)
    kind: str = "cuda"
    calls: list[tuple[str, int]] = field(default_factory=list)

    def devices(self) -> list[hardware.DeviceInfo]:
        return [hardware.DeviceInfo(i, self.name, f"GPU-{i:04d}") for i in range(len(self.tflops))]

    def matmul_tflops(
        self,
        device: hardware.DeviceInfo,
        size: int,
        dtype: gpu_models.Dtype,
        duration_s: float,
    ) -> float:
        self.calls.append(("matmul", device.index))
        self._maybe_fail(device)
        return self.tflops[device.index]

    def pattern_errors(self, device: hardware.DeviceInfo, fraction: float) -> int:
        self.calls.append(("pattern", device.index))
        self._maybe_fail(device)
        return self.mismatches.get(device.index, 0)

    def _maybe_fail(self, device: hardware.DeviceInfo) -> None:
        if device.index in self.errors:
            raise hardware.DeviceError(self.errors[device.index])



def burnin_summary(argv: Sequence[str], tflops: Sequence[float]) -> tuple[int, str]:
    """Run the real burn-in (evaluation, report) for the Job's ``gpuguard burnin`` argv over
    fake GPUs; the exit code and the termination message, as the container would give."""
    flags = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
    request = running.BurninRequest(
        mode=burnin.Mode(flags["--mode"]),
        expected_gpus=int(flags["--expected-gpus"]),
        xid=burnin.parse_reason(flags.get("--reason")),
        duration_s=1.0,
        size=64,
    )
    env = running.Environment(load_backend=lambda kind: FakeBackend(tflops), which=lambda _: None)
    result = running.run(request, env)
    return (0 if result.passed else 1), result.summary()



class Classifier:
    """The Xid classifier with the default user-class codes (13, 31, 43, 45, 68, 109)."""

    def is_hardware(self, code: int) -> bool:
        return code not in {13, 31, 43, 45, 68, 109}

    def is_hardware_event(self, code: int, rule: str) -> bool:
        return self.is_hardware(code)
