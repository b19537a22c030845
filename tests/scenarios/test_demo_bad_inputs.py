"""Bad inputs cost only what they touch, end to end in the demo: a node with forged, malformed
gpuguard annotations is never written to while every tick goes on and another node is
isolated, given its verdict and returned."""

from __future__ import annotations

from gpuguard.demo import harness, score
from gpuguard.model import settings
from gpuguard.sim import scenario


def test_a_malformed_annotation_costs_only_its_node_and_every_tick_goes_on() -> None:
    run = harness.play(scenario.load_shipped("malformed-annotation"), settings.GuardSettings())
    report = score.scenario_report(run)
    assert report["isolated"] == ["gpu-node-001"]
    assert report["verdicts"] == {"gpu-node-001": ["power-cycle"]}
    assert report["returned"] == ["gpu-node-001"]
    assert [e for e in report["timeline"] if e["kind"] == "guard_error"] == []
    assert run.played.store.list("Job", "gpuguard")[0]["spec"]["template"]["spec"][
        "nodeName"] == "gpu-node-001"
    # marks gpuguard did not write (managedFields name kubectl) are never its isolation
    assert "gpu-node-000" not in report["held"]
    marks = run.played.store.get("Node", "", "gpu-node-000")["metadata"]["annotations"]
    forged = {k: v for k, v in marks.items() if k.startswith("gpuguard.io/")}
    assert forged == {"gpuguard.io/reason": "xid-²", "gpuguard.io/isolated-at": "yesterday",
                      "gpuguard.io/gpu-pci": "0000:zz:00.0"}


def test_a_silent_exporter_is_a_finding_and_its_nodes_gpus_are_unknown_not_healthy() -> None:
    run = harness.play(scenario.load_shipped("exporter-silent"), settings.GuardSettings())
    report = score.scenario_report(run)
    timeline = report["timeline"]
    silent = [(e["node"], e["t"]) for e in timeline if e["reason"] == "exporter-silent"]
    assert [node for node, _ in silent] == ["gpu-node-a", "gpu-node-b"]
    assert 20 * 60 < silent[0][1] <= 23 * 60  # within the staleness bound (2 min) + a tick
    waits = [e for e in timeline if e["node"] == "gpu-node-b" and e["kind"] == "return_check"]
    after_boot = [e for e in waits if 46 * 60 <= e["t"] < 66 * 60]
    assert [e["reason"] for e in after_boot] == ["return-data-missing"]
    burnin = next(e for e in timeline if e["reason"] == "return-conditions-met")
    assert burnin["t"] >= 66 * 60  # only once its exporter answers again
    assert report["returned"] == ["gpu-node-b"]
    assert report["false_isolations"] == []


def test_the_real_agent_guards_a_node_whose_exporter_is_silent_and_its_absence_is_blind() -> None:
    run = harness.play(
        scenario.load_shipped("agent-guards-silent-exporter"), settings.GuardSettings()
    )
    report = score.scenario_report(run)
    assert report["isolated"] == ["gpu-node-b"]  # gpu-node-c has neither exporter nor agent
    isolation = next(e for e in report["timeline"] if e["kind"] == "isolate")
    # read from its kernel log by gpuguard's agent, reported as its node condition at once
    assert "(node-condition)" in isolation["detail"]
    assert report["time_to_isolate_s"]["gpu-node-b"] <= 16  # the next 15 s step + 1 s poll
    blind = {e["reason"] for e in report["timeline"] if e["node"] == "gpu-node-c"
             and e["kind"] == "guard_finding"}  # fmt: skip
    assert blind == {"agent-silent", "exporter-silent", "gpu-loss-without-xid"}
