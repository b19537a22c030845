"""One label rule for which node and GPU a series belongs to, whatever the exporter."""

from __future__ import annotations

import pytest

from gpuguard.model import series


@pytest.mark.parametrize(
    ("labels", "node"),
    [
        pytest.param({"node": "gpu-1", "Hostname": "gpu-1"}, "gpu-1", id="ksm-or-agent"),
        pytest.param({"Hostname": "gpu-2"}, "gpu-2", id="dcgm-4.4"),
        pytest.param({"hostname": "gpu-3"}, "gpu-3", id="dcgm-4.5"),
        pytest.param({"node": "", "Hostname": "gpu-4"}, "gpu-4", id="empty-node-label"),
        pytest.param({"pod": "x"}, None, id="none"),
    ],
)
def test_node_of(labels: dict[str, str], node: str | None) -> None:
    assert series.node_of(labels) == node


@pytest.mark.parametrize(
    ("labels", "gpu"),
    [
        pytest.param(
            {"gpu": "4", "UUID": "GPU-a", "pci_bus_id": "00000000:99:00.0"}, "4", id="dcgm"
        ),
        pytest.param({"uuid": "GPU-a", "pci": "0000:99:00.0"}, "GPU-a", id="uuid-before-pci"),
        pytest.param({"pci": "0000:99:00.0"}, "0000:99:00.0", id="pci-last"),
        pytest.param({}, "?", id="none"),
    ],
)
def test_gpu_of(labels: dict[str, str], gpu: str) -> None:
    assert series.gpu_of(labels) == gpu


@pytest.mark.parametrize(
    ("labels", "claimed"),
    [
        pytest.param({"node": "gpu-1", "Hostname": "gpu-1"}, None, id="same-node"),
        pytest.param({"node": "gpu-1", "Hostname": "gpu-9"}, "gpu-9", id="dcgm-shaped"),
        pytest.param({"node": "gpu-1", "hostname": "gpu-9"}, "gpu-9", id="dcgm-4.5-shaped"),
        pytest.param({"node": "gpu-1", "exported_node": "gpu-9"}, "gpu-9", id="agent-shaped"),
        pytest.param({"Hostname": "gpu-9"}, None, id="no-target-node: unverifiable"),
        pytest.param({"node": "gpu-1"}, None, id="ksm"),
    ],
)
def test_a_series_claiming_another_node_than_its_targets(
    labels: dict[str, str], claimed: str | None
) -> None:
    """docs/security.md#metric-forgery: ``node`` is the scrape target's node."""
    assert series.claimed_node(labels) == claimed


def test_source_of_names_the_scrape_target() -> None:
    labels = {"job": "kubernetes-pods", "namespace": "t", "pod": "p", "instance": "i:1", "x": "y"}
    assert series.source_of(labels) == "job=kubernetes-pods namespace=t pod=p instance=i:1"
    assert series.source_of({}) == "an unnamed target"
