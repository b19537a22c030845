"""A series read only for its scrape target's node (docs/security.md#metric-forgery): an Xid
series whose target ``node`` differs from the node it claims is read for no node, and the
isolation policy names its scrape target in a finding."""

from __future__ import annotations

from datetime import UTC, datetime

from gpuguard.model import decisions, fleet, settings
from gpuguard.model import metric_names as names
from gpuguard.policy import isolate, xid_signals
from tests.builders import Classifier

NOW = datetime(2026, 11, 24, 10, 30, tzinfo=UTC)
TARGET = {"job": "kubernetes-pods", "namespace": "tenant-a", "pod": "exporter-0",
          "instance": "10.1.2.3:9400", "node": "gpu-node-b"}  # fmt: skip
NODE_ONLY = settings.GuardSettings.model_validate({"gpu_isolation": {"enabled": False}})


def node(name: str, allocatable: int) -> fleet.Node:
    return fleet.Node(name=name, boot_id=f"boot-{name}", gpu_capacity=8,
                      gpu_allocatable=allocatable, conditions={"Ready": "True"})  # fmt: skip


def decide(*samples: fleet.MetricSample) -> isolate.IsolationDecision:
    nodes = (node("gpu-node-a", 7), node("gpu-node-b", 8))  # a's GPU dips
    snap = fleet.FleetSnapshot(taken_at=NOW, nodes=nodes, samples=samples)
    return isolate.decide(snap, Classifier(), NODE_ONLY)


def dcgm(labels: dict[str, str]) -> fleet.MetricSample:
    return fleet.MetricSample(names.DCGM_XID_LAST, {"gpu": "0", **labels}, 79.0, NOW)


def test_a_series_claiming_another_node_isolates_nothing_and_names_its_target() -> None:
    decision = decide(dcgm({"Hostname": "gpu-node-a", **TARGET}))
    assert decision.actions == ()
    (forged,) = [f for f in decision.findings if f.reason is decisions.Reason.FORGED_SERIES]
    assert forged.node == "gpu-node-b"
    assert "pod=exporter-0" in forged.detail
    assert "for node gpu-node-a" in forged.detail


def test_the_agents_counter_renamed_exported_node_is_read_for_no_node() -> None:
    counter = fleet.MetricSample(
        names.XID_TOTAL_RECENT,
        {"exported_node": "gpu-node-a", "gpu": "0", "xid": "79", **TARGET},
        1.0,
        NOW,
    )
    assert xid_signals.hardware_xids([counter], Classifier()) == {}
    (forged,) = xid_signals.forgeries([counter, counter])  # one finding per target and claim
    assert "gpuguard_xid_total for node gpu-node-a" in forged.detail


def test_the_exporters_own_series_is_read_for_its_node() -> None:
    own = dcgm({"Hostname": "gpu-node-a", "node": "gpu-node-a", "job": "nvidia-dcgm-exporter"})
    decision = decide(own)
    assert [a.node for a in decision.actions] == ["gpu-node-a"]
    assert xid_signals.forgeries([own]) == []


def test_without_a_target_node_the_claim_cannot_be_checked() -> None:
    """The residual risk docs/security.md names: a scrape job that writes no ``node`` leaves
    only ``prometheus.scrape_scope`` between a forger and the node it names."""
    decision = decide(dcgm({"Hostname": "gpu-node-a", **TARGET, "node": ""}))
    assert [a.node for a in decision.actions] == ["gpu-node-a"]
