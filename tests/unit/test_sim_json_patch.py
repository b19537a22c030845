"""JSON patch (RFC 6902) in the simulator's API (``sim.json_patch``): list positions and
pointer escapes, and a failing operation that leaves the object as it was. Held to a real API
server by tests/realcluster/test_api_differential.py (``patches``)."""

from __future__ import annotations

import pytest

from gpuguard.sim import json_patch

NODE = {"metadata": {"labels": {"a/b": "1"}},
        "spec": {"taints": [{"key": "x"}, {"key": "y"}]}}  # fmt: skip


def test_list_positions_and_escaped_pointers() -> None:
    patched = json_patch.apply(NODE, [
        {"op": "add", "path": "/spec/taints/-", "value": {"key": "z"}},
        {"op": "add", "path": "/spec/taints/0", "value": {"key": "w"}},
        {"op": "remove", "path": "/spec/taints/1"},
        {"op": "replace", "path": "/metadata/labels/a~1b", "value": "2"},
    ])

    assert [t["key"] for t in patched["spec"]["taints"]] == ["w", "y", "z"]
    assert patched["metadata"]["labels"] == {"a/b": "2"}
    assert [t["key"] for t in NODE["spec"]["taints"]] == ["x", "y"]  # the input is unchanged


@pytest.mark.parametrize("operation", [
    {"op": "remove", "path": "/spec/taints/5"},
    {"op": "replace", "path": "/metadata/annotations/x", "value": "1"},
    {"op": "test", "path": "/metadata/labels/a~1b", "value": "2"},
    {"op": "move", "from": "/nothing", "path": "/spec/x"},
    {"op": "frobnicate", "path": "/spec"},
])  # fmt: skip
def test_an_operation_that_cannot_apply_refuses_the_patch(operation: dict[str, object]) -> None:
    with pytest.raises(json_patch.PatchFailed):
        json_patch.apply(NODE, [{"op": "add", "path": "/spec/x", "value": 1}, operation])
