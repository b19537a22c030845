"""Scenario files: the documented shape loads, and every mistake names file, event and key."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

from gpuguard.errors import ScenarioError
from gpuguard.sim import scenario, state

EXAMPLE = """\
name: xid79-twice
fleet:
  nodes: [gpu-node-a, gpu-node-b]   # or a count: 40
  gpus_per_node: 8
  model: NVIDIA GeForce RTX 5090
  driver: "580.126.09"
events:
  - {at: 10m, xid: {node: gpu-node-b, gpu: 4, xid: 79}}
  - {at: 10m, gpu_lost: {node: gpu-node-b, gpu: 4}}
  - {at: 5d, power_cycle: {node: gpu-node-b}}
expect:
  isolate: [gpu-node-b]
  never_isolate: [gpu-node-a]
"""

FLEET = """\
name: t
fleet: {nodes: [gpu-node-a, gpu-node-b], gpus_per_node: 8}
"""


def test_the_documented_example_loads(tmp_path: Path) -> None:
    path = tmp_path / "xid79.yaml"
    path.write_text(EXAMPLE)
    spec = scenario.load(path)
    assert spec.node_names == ("gpu-node-a", "gpu-node-b")
    assert spec.nodes[1].driver == "580.126.09"
    assert spec.nodes[1].model == "NVIDIA GeForce RTX 5090"
    assert [(e.at, e.kind, e.node) for e in spec.events] == [
        (timedelta(minutes=10), "xid", "gpu-node-b"),
        (timedelta(minutes=10), "gpu_lost", "gpu-node-b"),
        (timedelta(days=5), "power_cycle", "gpu-node-b"),
    ]
    assert spec.expect.isolate == ("gpu-node-b",)
    assert spec.expect.never_isolate == ("gpu-node-a",)
    assert spec.end == timedelta(days=5) + scenario.DEFAULT_DURATION


def test_a_node_can_be_named_by_its_index_and_a_count_generates_names() -> None:
    spec = scenario.loads("""\
name: t
fleet: {nodes: 40}
events:
  - {at: 90s, reboot: {node: 39}}
expect: {never_isolate: [0]}
""")
    assert len(spec.nodes) == 40
    assert spec.node_names[0] == "gpu-node-000"
    assert spec.events[0].node == "gpu-node-039"
    assert spec.expect.never_isolate == ("gpu-node-000",)


def test_events_run_in_time_order_whatever_the_file_order() -> None:
    spec = scenario.loads(FLEET + """\
events:
  - {at: 1h, reboot: {node: 0}}
  - {at: 10m, kube_proxy_down: {node: 1}}
""")
    assert [e.kind for e in spec.events] == ["kube_proxy_down", "reboot"]
    assert [e.index for e in spec.events] == [1, 0]


def test_fleet_overrides_set_host_facts_per_node() -> None:
    spec = scenario.loads("""\
name: t
fleet:
  nodes: [a, b]
  ipvs_persisted: false
  overrides:
    b: {dns_servers: [10.0.0.2, 8.8.8.8], ipvs_persisted: true}
""")
    assert spec.nodes[0].ipvs_persisted is False
    assert spec.nodes[1].ipvs_persisted is True
    assert spec.nodes[1].dns_servers == ("10.0.0.2", "8.8.8.8")


def test_workload_payload_reads_profile_and_duration() -> None:
    spec = scenario.loads(FLEET + """\
events:
  - {at: 0s, workload: {node: 0, gpus: 2, profile: small_compute, duration: 1h}}
""")
    payload = spec.events[0].payload
    assert isinstance(payload, scenario.WorkloadPayload)
    assert payload.profile is state.WorkloadProfile.SMALL_COMPUTE
    assert payload.duration == timedelta(hours=1)


@pytest.mark.parametrize(
    ("events", "where"),
    [
        pytest.param("- {at: 10m, explode: {node: 0}}", r"events\[0\]\.explode: unknown event kind",
                     id="unknown-kind"),
        pytest.param("- {at: soon, reboot: {node: 0}}", r"events\[0\]\.at", id="bad-offset"),
        pytest.param("- {reboot: {node: 0}}", r"events\[0\]\.at: missing", id="missing-at"),
        pytest.param("- {at: 1m, xid: {node: 0, xid: 79}}", r"events\[0\]\.xid\.gpu",
                     id="missing-gpu"),
        pytest.param("- {at: 1m, xid: {node: 0, gpu: 8, xid: 79}}",
                     r"events\[0\]\.xid\.gpu: GPU 8 is outside 0-7", id="gpu-out-of-range"),
        pytest.param("- {at: 1m, xid: {node: gpu-node-z, gpu: 1, xid: 79}}",
                     r"events\[0\]\.xid\.node: no node 'gpu-node-z'", id="unknown-node"),
        pytest.param("- {at: 1m, reboot: {node: 2}}",
                     r"events\[0\]\.reboot\.node: node index 2 is outside", id="index-outside"),
        pytest.param("- {at: 1m, forged_metric: {node: 0, claims: gpu-node-z, gpu: 1}}",
                     r"events\[0\]\.forged_metric\.claims: no node 'gpu-node-z'",
                     id="forged-metric-claims-unknown-node"),
        pytest.param("- {at: 1m, xid: {node: 0, gpu: 1, xid: 79, colour: red}}",
                     r"events\[0\]\.xid\.colour", id="unknown-payload-key"),
        pytest.param("- {at: 1m, workload: {node: 0, gpus: 1, profile: mining}}",
                     r"events\[0\]\.workload\.profile", id="bad-profile"),
        pytest.param("- {at: 1m, reboot: {node: 0}, dbe: {node: 0, gpu: 1}}",
                     r"events\[0\]: expected exactly one event kind", id="two-kinds"),
        pytest.param("- {at: 1m, driver_upgrade: {node: 0, version: 580.95}}",
                     r"events\[0\]\.driver_upgrade\.version", id="unquoted-version"),
        pytest.param("- {at: 1m, reboot: {node: 0}}\n- {at: 2m, xid: {node: 0, gpu: x, xid: 1}}",
                     r"events\[1\]\.xid\.gpu", id="second-event-named"),
    ],
)
def test_a_bad_event_names_file_index_and_key(tmp_path: Path, events: str, where: str) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(FLEET + "events:\n" + "\n".join("  " + line for line in events.splitlines()))
    with pytest.raises(ScenarioError, match=re.escape(str(path)) + ": " + where):
        scenario.load(path)


@pytest.mark.parametrize(
    ("text", "where"),
    [
        pytest.param("name: t\nfleet: {nodes: [a], gpus_per_node: 99}",
                     "fleet.gpus_per_node", id="too-many-gpus"),
        pytest.param("name: t\nfleet: {nodes: [a], driver: 580.95}", "fleet.driver",
                     id="float-driver"),
        pytest.param("name: t\nfleet: {nodes: [a, a]}", "fleet.nodes.1: 'a' appears twice",
                     id="duplicate-node"),
        pytest.param("name: t\nfleet: {nodes: [a]}\nstart: 2026-09-10T13:00:00",
                     "start: needs a timezone", id="naive-start"),
        pytest.param("name: t\nfleet: {nodes: [a]}\nexpect: {isolate: [a], never_isolate: [a]}",
                     "expect:", id="contradicting-expect"),
        pytest.param("fleet: {nodes: [a]}", "name", id="missing-name"),
        pytest.param("name: t\nfleet: {nodes: [a]\n", "not valid YAML", id="broken-yaml"),
    ],
)
def test_a_bad_file_names_the_key(text: str, where: str) -> None:
    with pytest.raises(ScenarioError, match="my.yaml: " + where):
        scenario.loads(text, source="my.yaml")


def test_a_missing_file_is_a_scenario_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"nope\.yaml"):
        scenario.load(tmp_path / "nope.yaml")


def test_resolve_finds_shipped_scenarios_by_name_and_rejects_unknown_names() -> None:
    assert scenario.resolve("xid79-twice").name == "xid79-twice"
    with pytest.raises(ScenarioError, match="no-such-thing: no such file or shipped scenario"):
        scenario.resolve("no-such-thing")


def test_two_workloads_with_one_name_are_rejected_up_front() -> None:
    with pytest.raises(ScenarioError, match=r"events\[1\]\.workload\.name: 'job' is already"):
        scenario.loads(FLEET + """\
events:
  - {at: 0s, workload: {node: 0, gpus: 1, name: job}}
  - {at: 1h, workload: {node: 1, gpus: 1, name: job}}
""")
