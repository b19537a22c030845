"""Run one piece of work on every device at once and capture each device's error.

One thread per device, started together, so the node is loaded the way training loads it.
A device that raises fails alone with its error text; the others are still measured. A device
that hangs past its deadline is reported as hung; its daemon thread is abandoned, not joined.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuguard.agent.burnin import hardware
from gpuguard.policy import burnin


@dataclass
class _Outcome:
    value: float | None = None
    error: str | None = None


def on_every_device(
    targets: Sequence[hardware.DeviceInfo],
    work: Callable[[hardware.DeviceInfo], float],
    deadline_s: float,
) -> list[burnin.GpuResult]:
    """``work(device)`` on each device in parallel; its value becomes ``tflops`` in the result."""
    outcomes = [_Outcome() for _ in targets]
    threads = [
        threading.Thread(target=_capture, args=(work, device, outcome), daemon=True)
        for device, outcome in zip(targets, outcomes, strict=True)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + deadline_s
    for thread, outcome in zip(threads, outcomes, strict=True):
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            outcome.error = f"did not finish within {deadline_s:.0f}s (hung?)"
    return [_result(device, outcome) for device, outcome in zip(targets, outcomes, strict=True)]


def _capture(
    work: Callable[[hardware.DeviceInfo], float],
    device: hardware.DeviceInfo,
    outcome: _Outcome,
) -> None:
    try:
        outcome.value = work(device)
    except hardware.DeviceError as e:
        outcome.error = str(e)


def _result(device: hardware.DeviceInfo, outcome: _Outcome) -> burnin.GpuResult:
    value = None if outcome.error else outcome.value
    return burnin.GpuResult(device.index, device.name, device.uuid, value, outcome.error)
