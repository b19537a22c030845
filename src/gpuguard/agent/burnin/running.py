"""Run a burn-in end to end: choose the mode, run it on every device, judge, report.

The imperative shell around ``policy.burnin``: the backend, the command runner, ``which`` and
the throughput table are passed in (``Environment``), so tests run every path with fakes.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from gpuguard.agent import commands
from gpuguard.agent.burnin import cpu, cuda, dcgm, hardware, measuring, report
from gpuguard.catalog import gpu_models
from gpuguard.model import decisions, ports
from gpuguard.policy import burnin

HANG_GRACE_S = 120.0  # allocation, cuBLAS start-up and warm-up before the timed window
PATTERN_DEADLINE_S = 30 * 60.0
DEFAULT_MEMORY_FRACTION = 0.9


@dataclass(frozen=True, slots=True)
class BurninRequest:
    device: hardware.DeviceKind = hardware.DeviceKind.CUDA
    mode: burnin.Mode = burnin.Mode.AUTO
    xid: int | None = None
    duration_s: float = 90.0
    size: int = 8192
    dtype: gpu_models.Dtype = gpu_models.Dtype.FP16
    expected_gpus: int | None = None
    floor: float = burnin.DEFAULT_FLOOR
    min_max: float = burnin.SEED_MIN_MAX_RATIO
    dcgm_timeout_s: float = dcgm.DEFAULT_TIMEOUT_S
    memory_fraction: float = DEFAULT_MEMORY_FRACTION
    uuid: str | None = None  # burn in this GPU alone (an isolated GPU on its way back)


def load_backend(kind: hardware.DeviceKind) -> hardware.Backend:
    """The backend for ``kind``; BackendUnavailable when it cannot run here."""
    if kind is hardware.DeviceKind.CPU:
        return cpu.CpuBackend()
    return cuda.load()


@dataclass(frozen=True, slots=True)
class Environment:
    load_backend: Callable[[hardware.DeviceKind], hardware.Backend] = load_backend
    runner: ports.CommandRunner = field(default_factory=commands.SubprocessRunner)
    which: dcgm.Which = shutil.which
    table: gpu_models.GpuModelTable = field(default_factory=gpu_models.load_table)


def run(request: BurninRequest, env: Environment) -> report.BurninReport:
    """The burn-in's report; raises BackendUnavailable when the matmul cannot run at all."""
    if burnin.choose_mode(request.mode, request.xid) is burnin.Mode.MATMUL:
        return _matmul(request, env)
    return _memory(request, env)


def _matmul(request: BurninRequest, env: Environment) -> report.BurninReport:
    backend = env.load_backend(request.device)

    def work(device: hardware.DeviceInfo) -> float:
        return backend.matmul_tflops(device, request.size, request.dtype, request.duration_s)

    deadline = request.duration_s + HANG_GRACE_S
    results = measuring.on_every_device(_devices(backend, request), work, deadline)
    verdict = burnin.evaluate(
        results,
        request.expected_gpus,
        env.table,
        request.floor,
        request.min_max,
        dtype=request.dtype,
    )
    fractions = [burnin.fraction_of_expected(r, env.table, request.dtype) for r in results]
    note = (
        f"{request.size}x{request.size} {request.dtype} matmul on every GPU at once for "
        f"{request.duration_s:g}s; pass: all GPUs present, no error, min/max >= "
        f"{request.min_max:g}, each GPU >= {request.floor:g} of its model's dense throughput"
    )
    return _report(request, burnin.Mode.MATMUL, backend.kind, results, fractions, verdict, note)


def _memory(request: BurninRequest, env: Environment) -> report.BurninReport:
    if request.device is hardware.DeviceKind.CUDA and dcgm.installed(env.which):
        found = dcgm.count_gpus(env.runner)
        memory_test = dcgm.diagnose(env.runner, request.dcgm_timeout_s)
        verdict = burnin.evaluate_memory(found, request.expected_gpus, (), memory_test)
        note = (
            "dcgmi diag -r 4 (includes memtest): tens of minutes, up to ~45 min on a "
            "4-GPU Hopper server"
        )
        return _report(request, burnin.Mode.MEMORY, "cuda", (), (), verdict, note, found)
    try:
        backend = env.load_backend(request.device)
    except hardware.BackendUnavailable as e:
        return _no_memory_test(request, str(e))
    results = _pattern_test(backend, _devices(backend, request), request.memory_fraction)
    memory_test = _pattern_check(results, request.memory_fraction)
    verdict = burnin.evaluate_memory(len(results), request.expected_gpus, results, memory_test)
    note = (
        f"dcgmi not used: write/read patterns over {request.memory_fraction:.0%} of free "
        "memory on every GPU; lighter than DCGM's memtest"
    )
    fractions = [None] * len(results)
    return _report(request, burnin.Mode.MEMORY, backend.kind, results, fractions, verdict, note)


def _devices(backend: hardware.Backend, request: BurninRequest) -> list[hardware.DeviceInfo]:
    """The GPUs to burn in: every one, or the one ``--uuid`` names (none if it is not here:
    the GPU-count check then fails)."""
    found = backend.devices()
    return [d for d in found if d.uuid == request.uuid] if request.uuid else found


def _pattern_test(
    backend: hardware.Backend, devices: list[hardware.DeviceInfo], fraction: float
) -> list[burnin.GpuResult]:
    def work(device: hardware.DeviceInfo) -> float:
        mismatches = backend.pattern_errors(device, fraction)
        if mismatches:
            raise hardware.DeviceError(f"{mismatches} words read back wrong in the pattern test")
        return 0.0

    results = measuring.on_every_device(devices, work, PATTERN_DEADLINE_S)
    return [replace(result, tflops=None) for result in results]


def _pattern_check(results: Sequence[burnin.GpuResult], fraction: float) -> burnin.BurninCheck:
    failed = [r.label() for r in results if r.error is not None]
    if failed:
        status, evidence = decisions.CheckStatus.FAIL, "pattern test failed on " + ", ".join(failed)
    elif results:
        status = decisions.CheckStatus.PASS
        evidence = (
            f"{len(results)} GPU(s) read back every pattern over {fraction:.0%} of free memory"
        )
    else:
        status, evidence = decisions.CheckStatus.UNKNOWN, "no GPU to test"
    return burnin.BurninCheck(dcgm.CHECK, status, evidence)


def _no_memory_test(request: BurninRequest, why: str) -> report.BurninReport:
    evidence = f"no memory test possible: dcgmi is not on PATH and {why}"
    memory_test = burnin.BurninCheck(dcgm.CHECK, decisions.CheckStatus.UNKNOWN, evidence)
    verdict = burnin.evaluate_memory(None, request.expected_gpus, (), memory_test)
    note = "no memory test possible; see the memory-test check"
    return _report(request, burnin.Mode.MEMORY, request.device.value, (), (), verdict, note)


def _report(
    request: BurninRequest,
    mode: burnin.Mode,
    kind: str,
    results: Sequence[burnin.GpuResult],
    fractions: Sequence[float | None],
    verdict: burnin.BurninVerdict,
    note: str,
    found: int | None = None,
) -> report.BurninReport:
    if kind == hardware.DeviceKind.CPU:
        note = f"{report.CPU_NOTE} {note}"
        cpu_check = burnin.BurninCheck("device", decisions.CheckStatus.UNKNOWN, report.CPU_NOTE)
        verdict = burnin.BurninVerdict((*verdict.checks, cpu_check))
    return report.BurninReport(
        mode=mode,
        device=kind,
        dtype=request.dtype.value,
        size=request.size,
        duration_s=request.duration_s,
        gpus=tuple(results),
        fractions=tuple(fractions),
        expected_gpus=request.expected_gpus,
        found_gpus=len(results) if found is None and results else found,
        verdict=verdict,
        note=note,
    )
