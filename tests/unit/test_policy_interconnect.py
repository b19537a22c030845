"""Throttling and interconnect health (docs/fleet-health.md#throttling-and-interconnect): the
plan's named samples become findings past the thresholds, and nothing below them or absent."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpuguard.model import decisions, fleet
from gpuguard.model import metric_names as mn
from gpuguard.model import settings as settings_model
from gpuguard.policy import interconnect

AT = datetime(2026, 9, 1, 12, 0, tzinfo=UTC)
SETTINGS = settings_model.FleetHealthSettings()
GPU = {"Hostname": "gpu-node-1", "gpu": "3", "UUID": "GPU-3"}


def sample(what: str, value: float, window: str = mn.SHORT, **labels: str) -> fleet.MetricSample:
    base = dict(GPU) if "device" not in labels else {"instance": "gpu-node-2:9100"}
    return fleet.MetricSample(mn.windowed(what, window), base | labels, value, AT)


def throttle(reason: str, share: float, window: str = mn.SHORT) -> fleet.MetricSample:
    return sample(mn.THROTTLE_FRACTION, share, window, reason=reason)


@pytest.mark.parametrize("reason", ["sw-thermal", "hw-thermal", "hw-slowdown", "hw-power-brake"])
def test_a_gpu_throttled_for_a_counted_reason_is_a_finding(reason: str) -> None:
    [finding] = interconnect.detect([throttle(reason, 0.6)], SETTINGS)
    assert finding.kind == "gpu-throttled"
    assert finding.reason is decisions.Reason.GPU_THROTTLED
    assert (finding.node, finding.gpu) == ("gpu-node-1", "3")
    assert f"{reason} 60%" in finding.detail


@pytest.mark.parametrize(
    ("samples", "why"),
    [
        pytest.param([throttle("sw-power-cap", 1.0)], "power cap under load is normal", id="cap"),
        pytest.param([throttle("hw-thermal", 0.1)], "below the fraction", id="brief"),
        pytest.param([throttle("hw-thermal", 0.9, mn.LONG)], "long window only", id="long-only"),
        pytest.param([sample(mn.NVLINK_ERRORS_INCREASE, 3, counter="crc_flit")], "few CRC",
                     id="few-crc"),
        pytest.param([sample(mn.PCIE_REPLAYS_INCREASE, 2)], "few replays", id="few-replays"),
        pytest.param([sample(mn.IB_ERRORS_INCREASE, 40, device="mlx5_0", port="1",
                             counter="symbol_error")], "errors without a link down",
                     id="ib-symbol-errors-only"),
        pytest.param([], "no series: not checked, no finding", id="nothing"),
    ],
)
def test_no_finding(samples: list[fleet.MetricSample], why: str) -> None:
    assert interconnect.detect(samples, SETTINGS) == [], why


def test_nvlink_crc_and_replay_errors_add_up_to_the_threshold() -> None:
    samples = [sample(mn.NVLINK_ERRORS_INCREASE, 6, counter="crc_flit"),
               sample(mn.NVLINK_ERRORS_INCREASE, 4, counter="replay")]  # fmt: skip
    [finding] = interconnect.detect(samples, SETTINGS)
    assert finding.kind == "nvlink-errors"
    assert "crc_flit +6" in finding.detail


def test_one_nvlink_recovery_error_is_a_finding() -> None:
    [finding] = interconnect.detect(
        [sample(mn.NVLINK_ERRORS_INCREASE, 1, counter="recovery")], SETTINGS
    )
    assert finding.reason is decisions.Reason.NVLINK_ERRORS


def test_pcie_replays_past_the_threshold() -> None:
    [finding] = interconnect.detect([sample(mn.PCIE_REPLAYS_INCREASE, 250)], SETTINGS)
    assert finding.kind == "pcie-replays"
    assert "250" in finding.detail


def test_an_infiniband_link_down_is_a_flap_on_the_instance_node() -> None:
    samples = [
        sample(mn.IB_ERRORS_INCREASE, 2, device="mlx5_0", port="1", counter="link_downed"),
        sample(mn.IB_ERRORS_INCREASE, 7, device="mlx5_0", port="1", counter="symbol_error"),
    ]
    [finding] = interconnect.detect(samples, SETTINGS)
    assert finding.kind == "ib-link-flapping"
    assert finding.node == "gpu-node-2"
    assert "mlx5_0/1 went down 2 times (symbol_error +7)" in finding.detail


def test_an_extrapolated_increase_is_shown_rounded_and_a_fraction_still_counts() -> None:
    samples = [  # increase() extrapolates to the window's ends: 8 downs read as 8.14
        sample(mn.IB_ERRORS_INCREASE, 8.13559, device="mlx5_1", port="1", counter="link_downed"),
        sample(mn.IB_ERRORS_INCREASE, 1.0169, device="mlx5_0", port="1", counter="link_downed"),
    ]
    first, second = interconnect.detect(samples, SETTINGS)
    assert "mlx5_0/1 went down 1 times;" in first.detail
    assert "mlx5_1/1 went down 8 times;" in second.detail
    assert second.evidence[0].value == "+8"


def test_a_node_label_wins_over_the_instance() -> None:
    labels = {"node": "gpu-node-7", "instance": "10.0.0.7:9100", "device": "mlx5_1", "port": "1"}
    assert interconnect.node_of(labels) == "gpu-node-7"


def test_thresholds_come_from_settings() -> None:
    strict = settings_model.FleetHealthSettings(pcie_replays_min=1, throttle_min_fraction=0.05)
    samples = [sample(mn.PCIE_REPLAYS_INCREASE, 2), throttle("hw-thermal", 0.1)]
    kinds = sorted(f.kind for f in interconnect.detect(samples, strict))
    assert kinds == ["gpu-throttled", "pcie-replays"]


def test_persistent_nodes_come_from_the_long_window() -> None:
    samples = [
        throttle("hw-slowdown", 0.5, mn.LONG),
        throttle("hw-thermal", 0.9),  # short window only: not persistent
        sample(mn.IB_ERRORS_INCREASE, 4, mn.LONG, device="mlx5_0", port="1", counter="link_downed"),
        sample(mn.IB_ERRORS_INCREASE, 2, mn.LONG, device="mlx5_1", port="1", counter="link_downed"),
    ]
    found = interconnect.persistent(samples, SETTINGS)
    assert [h.node for h in found] == ["gpu-node-1", "gpu-node-2"]
    assert found[0].reasons == ("GPU 3 clocks cut: hw-slowdown 50% of the window",)
    assert len(found[1].reasons) == 1  # mlx5_1 went down 2 times: under persistent_ib_flaps
    assert "mlx5_0/1" in found[1].reasons[0]


def test_unchecked_names_the_kinds_without_series() -> None:
    samples = [throttle("hw-thermal", 0.0), sample(mn.PCIE_REPLAYS_INCREASE, 0)]
    assert interconnect.unchecked(samples) == ["nvlink-errors", "ib-link-flapping"]


def test_a_kind_filtered_to_nothing_is_checked_when_its_coverage_counts_series() -> None:
    """The guard's plan asks only for values that can make a finding: a healthy fleet answers
    no NVLink series, and the coverage count tells "all flat" from "not collected"."""
    covered = fleet.MetricSample(mn.coverage(mn.NVLINK_ERRORS_INCREASE), {}, 64.0, AT)
    samples = [throttle("hw-thermal", 0.0), sample(mn.PCIE_REPLAYS_INCREASE, 0), covered]
    assert interconnect.unchecked(samples) == ["ib-link-flapping"]
    assert interconnect.detect(samples, SETTINGS) == []
