"""The agent's node conditions: the message form both sides read, and what is urgent."""

from __future__ import annotations

import pytest

from gpuguard.model import node_conditions as nc

GONE = nc.GpuNamed("3", "0000:3b:00.0", "GPU-3b", 79)


def _fallen(reason: str, *gpus: nc.GpuNamed, status: str = "True") -> dict[str, nc.GpuCondition]:
    message = nc.message(gpus, "PCI config space reads all ones")
    return {nc.GPU_FALLEN_OFF_BUS: nc.GpuCondition(nc.GPU_FALLEN_OFF_BUS, status, reason, message)}


def test_the_message_names_each_gpu_and_reads_back() -> None:
    other = nc.GpuNamed("5", "0000:5e:00.0", None, None)
    text = nc.message([GONE, other], "PCI config space reads all ones")
    assert text == (
        "gpu=3 pci=0000:3b:00.0 uuid=GPU-3b xid=79, gpu=5 pci=0000:5e:00.0;"
        " PCI config space reads all ones"
    )
    assert nc.gpus_in(text) == (GONE, other)


def test_free_text_names_no_gpu() -> None:
    assert nc.gpus_in("the kernel log cannot be read: permission denied") == ()
    assert nc.gpus_in("gpu=; x") == ()


def test_a_long_message_is_cut() -> None:
    many = [nc.GpuNamed(str(i), f"0000:{i:02x}:00.0", f"GPU-{'a' * 36}", 79) for i in range(64)]
    assert len(nc.message(many, "gone")) == nc.MAX_MESSAGE


def test_only_a_gpu_gone_from_the_bus_is_unambiguous() -> None:
    assert nc.unambiguous_fault(_fallen(nc.GONE_FROM_BUS, GONE)) is not None
    assert nc.unambiguous_fault(_fallen("KernelReportedFallenOffBus", GONE)) is None
    assert nc.unambiguous_fault(_fallen(nc.GONE_FROM_BUS, GONE, status="False")) is None
    assert nc.unambiguous_fault({}) is None


def test_urgent_when_new_or_naming_a_new_gpu_only() -> None:
    gone = _fallen(nc.GONE_FROM_BUS, GONE)
    assert nc.newly_urgent(None, gone)
    assert nc.newly_urgent({}, gone)
    assert not nc.newly_urgent(gone, gone)
    second = _fallen(nc.GONE_FROM_BUS, GONE, nc.GpuNamed("4", "0000:4c:00.0", None, 79))
    assert nc.newly_urgent(gone, second)
    assert not nc.newly_urgent(second, gone)
    assert not nc.newly_urgent(None, _fallen("KernelReportedFallenOffBus", GONE))


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        pytest.param([{"type": "Ready", "lastTransitionTime": "2026-09-21T05:53:30Z",
                       "lastHeartbeatTime": "2026-09-21T05:53:30.123456+00:00"}], (),
                     id="rfc3339"),
        pytest.param([{"type": "Ready"}], (), id="no-times"),
        pytest.param([{"type": "Ready", "lastTransitionTime": "yesterday"}],
                     ("Ready lastTransitionTime 'yesterday'",), id="not-a-time"),
        pytest.param([{"type": "Ready", "lastHeartbeatTime": "2026-09-21T05:53:30"}],
                     ("Ready lastHeartbeatTime '2026-09-21T05:53:30'",), id="no-zone"),
        pytest.param([{"type": "GpuFallenOffBus", "lastTransitionTime": 1758434010}],
                     ("GpuFallenOffBus lastTransitionTime '1758434010'",), id="a-number"),
        pytest.param([{"lastTransitionTime": "x"}, "not a condition"],
                     ("? lastTransitionTime 'x'",), id="no-type"),
        pytest.param("not a list", (), id="not-a-list"),
    ],
)  # fmt: skip
def test_malformed_times_names_each_condition_and_field(
    conditions: object, expected: tuple[str, ...]
) -> None:
    assert nc.malformed_times(conditions) == expected
