"""The burn-in end to end over a fake device backend: shared timing, per-GPU error capture,
memory mode with and without DCGM, and the compact termination message."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from gpuguard.agent.burnin import cpu, dcgm, hardware, measuring, report, running, timing
from gpuguard.catalog import gpu_models
from gpuguard.model import ports
from gpuguard.policy import burnin
from tests.builders import H100, HEALTHY, FakeBackend


@dataclass
class ScriptedRunner:
    """A CommandRunner answering per command (keyed by argv[1]); records argv and timeouts."""

    answers: dict[str, ports.CommandResult]
    calls: list[tuple[tuple[str, ...], float]] = field(default_factory=list)

    def run(self, argv: Sequence[str], *, timeout_s: float) -> ports.CommandResult:
        self.calls.append((tuple(argv), timeout_s))
        return self.answers[argv[1]]


def answer(argv: tuple[str, ...], code: int | None, stdout: str) -> ports.CommandResult:
    return ports.CommandResult(argv, code, stdout, "")


DIAG_PASS = """\
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
| Memory                    | Pass - All                                     |
| Targeted Stress           | Pass - All                                     |
+---------------------------+------------------------------------------------+
"""
DIAG_MEMTEST_FAIL = DIAG_PASS.replace(
    "| Memory                    | Pass - All",
    "| Memory                    | Fail - GPU: 4  memtest found 12 errors",
)
DISCOVERY = "8 GPUs found.\n+--------+---------+\n"


def dcgm_runner(diag: ports.CommandResult) -> ScriptedRunner:
    discovery = answer(dcgm.DISCOVERY_ARGV, 0, DISCOVERY)
    return ScriptedRunner({"discovery": discovery, "diag": diag})


def no_dcgm(_: str) -> str | None:
    return None


def with_dcgm(name: str) -> str | None:
    return f"/usr/bin/{name}"


def env_for(
    backend: FakeBackend | None, runner: ScriptedRunner | None = None, dcgmi: bool = False
) -> running.Environment:
    def load(kind: hardware.DeviceKind) -> hardware.Backend:
        if backend is None:
            raise hardware.BackendUnavailable("PyTorch is not installed")
        return backend

    return running.Environment(
        load_backend=load,
        runner=runner or ScriptedRunner({}),
        which=with_dcgm if dcgmi else no_dcgm,
        table=gpu_models.load_table(),
    )


def request(**changes: Any) -> running.BurninRequest:
    return replace(running.BurninRequest(expected_gpus=8, duration_s=0.01), **changes)


def by_check(result: report.BurninReport) -> dict[str, burnin.BurninCheck]:
    return {check.check: check for check in result.verdict.checks}


def test_eight_equal_gpus_pass_and_each_ran_its_matmul() -> None:
    backend = FakeBackend([HEALTHY] * 8)
    result = running.run(request(), env_for(backend))
    assert result.passed
    assert sorted(backend.calls) == [("matmul", i) for i in range(8)]
    assert [gpu["fraction_of_expected"] for gpu in result.as_dict()["gpus"]] == [0.748] * 8


def test_a_uuid_burns_in_that_gpu_alone_and_a_missing_one_fails_the_count() -> None:
    backend = FakeBackend([HEALTHY] * 8)
    result = running.run(request(expected_gpus=1, uuid="GPU-0003"), env_for(backend))
    assert result.passed
    assert backend.calls == [("matmul", 3)]
    absent = running.run(request(expected_gpus=1, uuid="GPU-0009"), env_for(FakeBackend([HEALTHY])))
    assert not absent.passed
    assert by_check(absent)["gpu-count"].status is burnin.FAIL


def test_cuda_error_on_one_gpu_fails_with_its_text_while_the_others_are_measured() -> None:
    backend = FakeBackend([HEALTHY] * 8, errors={5: "CUDA error: an illegal memory access"})
    result = running.run(request(), env_for(backend))
    assert not result.passed
    gpus = result.as_dict()["gpus"]
    assert gpus[5]["error"] == "CUDA error: an illegal memory access"
    assert gpus[5]["tflops"] is None
    assert all(gpu["tflops"] == HEALTHY for i, gpu in enumerate(gpus) if i != 5)
    assert "illegal memory access" in by_check(result)["gpu-errors"].evidence


def test_a_hung_gpu_is_reported_and_not_waited_for() -> None:
    release = threading.Event()

    def work(device: hardware.DeviceInfo) -> float:
        if device.index == 1:
            release.wait(60)
        return 1.0

    targets = [hardware.DeviceInfo(i, H100) for i in range(3)]
    # long enough for the healthy devices' threads to run on a loaded machine
    results = measuring.on_every_device(targets, work, deadline_s=1.0)
    release.set()
    assert [r.error is None for r in results] == [True, False, True]
    assert "hung" in (results[1].error or "")


def test_memory_mode_for_xid48_runs_dcgm_diag_level_4_with_a_hard_timeout() -> None:
    runner = dcgm_runner(answer(dcgm.DIAG_ARGV, 0, DIAG_PASS))
    backend = FakeBackend([HEALTHY] * 8)
    result = running.run(
        request(xid=48, dcgm_timeout_s=2700.0), env_for(backend, runner, dcgmi=True)
    )
    assert result.mode is burnin.Mode.MEMORY
    assert (dcgm.DIAG_ARGV, 2700.0) in runner.calls
    assert backend.calls == []  # neither matmul nor pattern test when DCGM does the work
    assert result.passed
    assert result.found_gpus == 8
    assert "tens of minutes" in result.note


def test_memtest_failure_in_dcgm_fails_naming_the_gpu() -> None:
    runner = dcgm_runner(answer(dcgm.DIAG_ARGV, 226, DIAG_MEMTEST_FAIL))
    result = running.run(request(xid=48), env_for(FakeBackend([]), runner, dcgmi=True))
    memory = by_check(result)["memory-test"]
    assert memory.status is burnin.FAIL
    assert "GPU: 4" in memory.evidence
    assert not result.passed


def test_dcgm_timeout_is_unknown_never_pass() -> None:
    runner = dcgm_runner(answer(dcgm.DIAG_ARGV, None, DIAG_PASS))
    result = running.run(request(xid=94), env_for(FakeBackend([]), runner, dcgmi=True))
    assert by_check(result)["memory-test"].status is burnin.UNKNOWN
    assert not result.passed


def test_without_dcgm_memory_mode_runs_the_pattern_test_on_every_gpu() -> None:
    backend = FakeBackend([HEALTHY] * 8, mismatches={2: 17})
    result = running.run(request(xid=48), env_for(backend))
    assert sorted(backend.calls) == [("pattern", i) for i in range(8)]
    assert by_check(result)["memory-test"].status is burnin.FAIL
    assert "17 words" in (result.gpus[2].error or "")
    assert not result.passed


def test_without_dcgm_a_clean_pattern_test_passes() -> None:
    result = running.run(request(xid=95), env_for(FakeBackend([HEALTHY] * 8)))
    assert result.passed
    assert "lighter than DCGM" in result.note


def test_neither_dcgm_nor_cuda_is_unknown_with_a_note() -> None:
    result = running.run(request(xid=48), env_for(None))
    memory = by_check(result)["memory-test"]
    assert memory.status is burnin.UNKNOWN
    assert "dcgmi is not on PATH" in memory.evidence
    assert "PyTorch is not installed" in memory.evidence
    assert not result.passed


def test_xid79_runs_the_matmul_even_with_dcgm_installed() -> None:
    backend = FakeBackend([HEALTHY] * 8)
    runner = ScriptedRunner({})
    result = running.run(request(xid=79), env_for(backend, runner, dcgmi=True))
    assert result.mode is burnin.Mode.MATMUL
    assert runner.calls == []


def test_matmul_without_a_backend_raises_for_exit_2() -> None:
    with pytest.raises(hardware.BackendUnavailable):
        running.run(request(), env_for(None))


def test_cpu_mode_runs_the_shared_loop_and_never_passes() -> None:
    env = running.Environment(which=no_dcgm)
    result = running.run(request(device=hardware.DeviceKind.CPU, size=8, expected_gpus=1), env)
    assert result.device == "cpu"
    assert result.gpus[0].tflops is not None
    assert result.gpus[0].tflops > 0
    assert result.note.startswith("CPU mode: not a burn-in result")
    assert by_check(result)["device"].status is burnin.UNKNOWN
    assert not result.passed


def test_cpu_pattern_test_reads_back_every_pattern() -> None:
    assert cpu.CpuBackend().pattern_errors(hardware.DeviceInfo(0, cpu.CPU_NAME), 0.1) == 0


def test_summary_fits_the_termination_message_with_long_errors_on_64_gpus() -> None:
    errors = {i: f"CUDA error on {i}: " + "x" * 3000 for i in range(0, 64, 2)}
    backend = FakeBackend([HEALTHY] * 64, errors=errors)
    result = running.run(request(expected_gpus=64), env_for(backend))
    summary = result.summary()
    assert len(summary.encode()) <= report.SUMMARY_LIMIT
    parsed = json.loads(summary)
    assert parsed["passed"] is False
    assert {c["check"]: c["status"] for c in parsed["checks"]}["gpu-errors"] == "FAIL"


def test_timing_excludes_warmup_and_synchronises_before_the_clock_starts() -> None:
    events: list[str] = []
    ticks = iter([10.0, 10.4, 10.8, 11.2])

    def clock() -> float:
        events.append("clock")
        return next(ticks)

    run = timing.time_steps(
        lambda: events.append("step"),
        lambda: events.append("sync"),
        1.0,
        warmup_steps=2,
        clock=clock,
    )
    assert events[:4] == ["step", "step", "sync", "clock"]
    assert run == timing.Timing(steps=3, seconds=pytest.approx(1.2))


def test_tflops_of_one_8192_matmul_per_second() -> None:
    assert timing.matmul_tflops(8192, 1, 1.0) == pytest.approx(2 * 8192**3 / 1e12)
