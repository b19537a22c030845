"""Persistent GPU states read every cycle: a driver that still asks for a reset after the
Xid 154 line was missed, and an NVLink fabric that Fabric Manager never completed."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuguard.agent.checks import gpu_state, registry, running, settings
from gpuguard.model import decisions
from tests.unit.hosttree import FakeRunner

Status = decisions.CheckStatus
B200 = "00000000:18:00.0"
B201 = "00000000:19:00.0"


@pytest.mark.parametrize(
    ("stdout", "status", "names"),
    [
        pytest.param(f"{B200}, None\n{B201}, None\n", Status.PASS, "2 GPU", id="none-pending"),
        pytest.param(f"{B200}, None\n{B201}, GPU Reset\n", Status.FAIL, "0000:19:00.0: GPU Reset",
                     id="missed-xid154-reset-seen-again"),
        pytest.param(f"{B200}, Node Reboot\n", Status.FAIL, "Node Reboot", id="reboot-required"),
        pytest.param(f"{B200}, Drain and Reset\n", Status.FAIL, "Drain and Reset",
                     id="drain-and-reset"),
        pytest.param(f"{B200}, [N/A]\n", Status.WARN, "older than R550", id="driver-too-old"),
        pytest.param("garbage without a pci\n", Status.UNKNOWN, "no GPU line",
                     id="garbage-is-unknown"),
        pytest.param("", Status.UNKNOWN, "no GPU line", id="no-gpu-is-unknown"),
    ],
)
def test_recovery_action(stdout: str, status: Status, names: str) -> None:
    runner = FakeRunner(stdout=stdout)
    found = gpu_state.check_recovery(runner, 5.0)
    assert (found.status, found.check) == (status, gpu_state.RECOVERY)
    assert names in found.evidence
    assert runner.calls == [(("nvidia-smi", "--query-gpu=pci.bus_id,gpu_recovery_action",
                              "--format=csv,noheader"), 5.0)]


@pytest.mark.parametrize(
    ("stdout", "status", "names"),
    [
        pytest.param(f"{B200}, Completed, Success\n", Status.PASS, "registered", id="done"),
        pytest.param(f"{B200}, [N/A], [N/A]\n", Status.PASS, "no NVLink fabric", id="no-fabric"),
        pytest.param(f"{B200}, In Progress, N/A\n", Status.WARN, "in progress", id="training"),
        pytest.param(f"{B200}, Not Started, N/A\n", Status.FAIL, "never started",
                     id="fabric-manager-down"),
        pytest.param(f"{B200}, Completed, Success\n{B201}, Completed, Failure\n", Status.FAIL,
                     "0000:19:00.0: state completed, status failure", id="one-gpu-failed"),
    ],
)
def test_fabric_state(stdout: str, status: Status, names: str) -> None:
    found = gpu_state.check_fabric(FakeRunner(stdout=stdout), 5.0)
    assert (found.status, found.check) == (status, gpu_state.FABRIC)
    assert names in found.evidence


@pytest.mark.parametrize(
    ("runner", "status"),
    [
        pytest.param(FakeRunner(returncode=None), Status.UNKNOWN, id="timeout-is-unknown"),
        pytest.param(FakeRunner(returncode=9, stderr="NVML failed"), Status.UNKNOWN,
                     id="failure-is-unknown"),
        pytest.param(FakeRunner(returncode=127), Status.WARN, id="no-nvidia-smi-warns"),
    ],
)
def test_a_query_that_cannot_answer_is_never_pass(runner: FakeRunner, status: Status) -> None:
    assert gpu_state.check_fabric(runner, 5.0).status is status


def test_the_states_run_after_the_host_checks_only_when_asked(tmp_path: Path) -> None:
    runner = FakeRunner(stdout=f"{B200}, None\n")
    plain = running.run_checks(tmp_path, settings.CheckSettings(), runner)
    asked = running.run_checks(tmp_path, settings.CheckSettings(), runner, False,
                               registry.GPU_STATE_CHECKS)
    assert [r.check for r in asked] == [r.check for r in plain] + [gpu_state.RECOVERY,
                                                                    gpu_state.FABRIC]
