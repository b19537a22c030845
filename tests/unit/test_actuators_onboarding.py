"""The onboarding gate's one merge patch: the report always, the taint gone only on a pass."""

from __future__ import annotations

import pytest

from gpuguard.actuators import onboarding as writer
from gpuguard.model import annotation_keys, onboarding

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
OURS = {"key": annotation_keys.ONBOARDING_TAINT, "value": "pending", "effect": "NoSchedule"}
NODE = onboarding.GateNode("gpu-node-new", resource_version="42", taints=(GPU_TAINT, OURS))


@pytest.mark.parametrize(
    ("node", "passed", "taints"),
    [
        pytest.param(NODE, True, [GPU_TAINT], id="passed-removes-only-ours"),
        pytest.param(NODE, False, None, id="blocked-keeps-the-taints"),
        pytest.param(
            onboarding.GateNode("gpu-node-old", "42", taints=(GPU_TAINT,)), True, None,
            id="already-untainted",
        ),
    ],
)
def test_the_patch_is_guarded_and_untaints_only_a_passed_tainted_node(
    node: onboarding.GateNode, passed: bool, taints: list[dict[str, str]] | None
) -> None:
    patch = writer.gate_patch(node, '{"passed": true}', passed=passed)

    assert patch["metadata"] == {
        "resourceVersion": "42",
        "annotations": {annotation_keys.GATE_REPORT: '{"passed": true}'},
    }
    assert patch.get("spec", {}).get("taints") == taints
