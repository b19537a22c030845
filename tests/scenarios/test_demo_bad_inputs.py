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
    assert "waiting: still-cordoned" in report["held"]["gpu-node-000"]
    marks = run.played.store.get("Node", "", "gpu-node-000")["metadata"]["annotations"]
    forged = {k: v for k, v in marks.items() if k.startswith("gpuguard.io/")}
    assert forged == {"gpuguard.io/reason": "xid-²", "gpuguard.io/isolated-at": "yesterday",
                      "gpuguard.io/gpu-pci": "0000:zz:00.0"}
