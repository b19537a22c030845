"""Faults a kernel Xid line does not show, the guard against the shipped scenarios
(docs/xid-events.md#persistent-states): a fatal NVSwitch SXid and a Fabric Manager that never
registered the GPUs isolate their nodes after the hold window with every GPU still
allocatable, non-fatal SXids isolate nothing; an Xid 154 whose line never reached the log is
seen again through the driver's recovery action. Played without the agent's persistent-state
reads (``gpu_state: false``), the Fabric Manager failure and the missed Xid 154 go unseen (the
reads are what catches them); the fatal SXid, a kernel line, is still caught."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpuguard.demo import harness, score
from gpuguard.model import settings
from gpuguard.sim import scenario
from tests import demo_runs


def report(name: str) -> dict[str, Any]:
    return score.scenario_report(demo_runs.play(name))


def without_gpu_state(name: str) -> dict[str, Any]:
    spec = scenario.load_shipped(name)
    nodes = tuple(dataclasses.replace(n, gpu_state=False) for n in spec.nodes)
    played = harness.play(dataclasses.replace(spec, nodes=nodes), settings.GuardSettings())
    return score.scenario_report(played)


def isolations(r: dict[str, Any]) -> dict[str, str]:
    return {e["node"]: e["detail"] for e in r["timeline"] if e["kind"] == "isolate"}


def requests(r: dict[str, Any]) -> dict[str, str]:
    return {e["node"]: e["detail"] for e in r["timeline"] if e["kind"] == "verdict"}


def test_a_fatal_sxid_and_a_failed_fabric_isolate_their_nodes_after_the_hold_window() -> None:
    r = report("hgx-nvswitch-fabric")
    assert (sorted(r["isolated"]), r["false_isolations"], r["missed"]) == (
        ["hgx-node-1", "hgx-node-2"], [], [])
    assert all(600 <= s <= 660 for s in r["time_to_isolate_s"].values())
    found = isolations(r)
    assert found["hgx-node-1"].startswith("sxid-20034 on GPU ?")
    assert found["hgx-node-2"].startswith("fabric-registration-failed on GPU ?")
    assert all("GPUs 8/8 allocatable" in d and "(fabric-fault)" in d for d in found.values())
    said = requests(r)
    assert "reboot the node to reset its NVSwitches and GPUs" in said["hgx-node-1"]
    assert "restart it, or reboot the node" in said["hgx-node-2"]
    assert all("NVLink fabric fault" in text for text in said.values())
    assert sorted(r["returned"]) == ["hgx-node-1", "hgx-node-2"]  # the reboot 25 min in
    assert [line["kind"] for line in r["ledger"]] == ["fabric", "fabric"]


def test_non_fatal_sxids_are_logged_and_isolate_nothing() -> None:
    r = report("hgx-nvswitch-fabric")
    logged = [e for e in r["timeline"] if e["kind"] == "sxid" and e["node"] == "hgx-node-3"]
    assert len(logged) == 2
    assert "hgx-node-3" not in r["isolated"]


def test_a_missed_xid_154_is_isolated_through_the_recovery_action() -> None:
    r = report("gb200-missed-xid154")
    assert (r["isolated"], r["false_isolations"], r["missed"]) == (["gb200-node-1"], [], [])
    assert 600 <= r["time_to_isolate_s"]["gb200-node-1"] <= 660
    assert isolations(r)["gb200-node-1"].startswith("xid-154 on GPU 2 (node-condition)")
    assert "the driver asks for recovery: 0000:3a:00.0: GPU Reset" in requests(r)["gb200-node-1"]
    assert r["returned"] == ["gb200-node-1"]  # the reboot cleared the recovery action
    assert {line["confirmation"] for line in r["ledger"]} <= {"confirmed-by-device-plugin",
                                                               "observed"}


def test_without_the_persistent_state_reads_only_the_kernel_line_is_caught() -> None:
    fabric, missed = without_gpu_state("hgx-nvswitch-fabric"), without_gpu_state(
        "gb200-missed-xid154")
    assert (fabric["isolated"], fabric["missed"]) == (["hgx-node-1"], ["hgx-node-2"])
    assert (missed["isolated"], missed["missed"]) == ([], ["gb200-node-1"])
