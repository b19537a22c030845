"""Strategic merge patch as the API server applies it to the kinds the simulator serves."""

from __future__ import annotations

import pytest

from gpuguard.sim import store, strategic_merge

POD = {
    "metadata": {"name": "p", "finalizers": ["a.example.com/keep"]},
    "spec": {"containers": [
        {"name": "main", "image": "trainer:1", "env": [{"name": "A", "value": "1"}]},
        {"name": "sidecar", "image": "log:1"},
    ], "tolerations": [{"key": "x", "operator": "Exists"}]},
    "status": {"conditions": [{"type": "Ready", "status": "True"},
                              {"type": "PodScheduled", "status": "True"}]},
}


def test_containers_and_their_env_merge_by_name() -> None:
    patch = {"spec": {"containers": [{"name": "main", "image": "trainer:2",
                                      "env": [{"name": "B", "value": "2"}]}]}}

    merged = strategic_merge.apply("Pod", POD, patch)

    # an item the server did not have goes before the server-only ones (``mergeSortedSlice``;
    # held to a real API server in tests/realcluster/test_api_differential.py)
    assert merged["spec"]["containers"] == [
        {"name": "main", "image": "trainer:2",
         "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}]},
        {"name": "sidecar", "image": "log:1"},
    ]
    assert POD["spec"]["containers"][0]["image"] == "trainer:1"  # the input is not changed


def test_a_list_without_a_merge_key_is_replaced() -> None:
    patch = {"spec": {"tolerations": [{"key": "y", "operator": "Exists"}]}}

    merged = strategic_merge.apply("Pod", POD, patch)

    assert merged["spec"]["tolerations"] == [{"key": "y", "operator": "Exists"}]


def test_pod_conditions_merge_by_type_and_patch_delete_removes_one() -> None:
    patch = {"status": {"conditions": [{"type": "PodScheduled", "$patch": "delete"},
                                       {"type": "DisruptionTarget", "status": "True"}]}}

    merged = strategic_merge.apply("Pod", POD, patch)

    assert [c["type"] for c in merged["status"]["conditions"]] == ["DisruptionTarget", "Ready"]


def test_finalizers_are_a_set_and_delete_from_primitive_list_removes_one() -> None:
    keep = "a.example.com/keep"
    added = strategic_merge.apply("Pod", POD, {"metadata": {"finalizers": ["b", keep]}})
    removed = strategic_merge.apply(
        "Pod", added, {"metadata": {"$deleteFromPrimitiveList/finalizers": [keep]}}
    )

    assert added["metadata"]["finalizers"] == ["b", "a.example.com/keep"]  # the patch's order
    assert removed["metadata"]["finalizers"] == ["b"]


def test_patch_replace_replaces_a_merged_list_or_a_map_whole() -> None:
    merged = strategic_merge.apply("Pod", POD, {
        "status": {"conditions": [{"$patch": "replace"}, {"type": "Ready", "status": "False"}]},
        "spec": {"$patch": "replace", "containers": [{"name": "only"}]},
    })

    assert merged["status"]["conditions"] == [{"type": "Ready", "status": "False"}]
    assert merged["spec"] == {"containers": [{"name": "only"}]}


def test_set_element_order_puts_the_named_items_first() -> None:
    merged = strategic_merge.apply("Pod", POD, {"status": {
        "$setElementOrder/conditions": [{"type": "PodScheduled"}, {"type": "Ready"}],
        "conditions": [{"type": "Ready", "status": "False"}]}})

    assert [c["type"] for c in merged["status"]["conditions"]] == ["PodScheduled", "Ready"]


def test_null_deletes_a_field_as_in_a_json_merge_patch() -> None:
    merged = strategic_merge.apply("Pod", POD, {"spec": {"tolerations": None}})

    assert "tolerations" not in merged["spec"]


def test_an_unknown_directive_is_refused() -> None:
    with pytest.raises(strategic_merge.PatchInvalid, match="unknown patch directive"):
        strategic_merge.apply("Pod", POD, {"spec": {"$patch": "explode"}})


def test_the_store_keeps_the_status_scope_and_checks_the_precondition() -> None:
    s = store.ObjectStore()
    created = s.create("Node", "", {"metadata": {"name": "n"}, "spec": {},
                                    "status": {"conditions": [{"type": "Ready"}]}})
    patch = {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]},
             "spec": {"unschedulable": True},
             "status": {"conditions": [{"type": "GpuFallenOffBus", "status": "True"}]}}

    updated = s.merge_patch("Node", "", "n", patch, scope=store.Scope.STATUS, strategic=True)

    assert updated["spec"] == {}
    assert [c["type"] for c in updated["status"]["conditions"]] == ["GpuFallenOffBus", "Ready"]
    with pytest.raises(store.StoreConflict):
        s.merge_patch("Node", "", "n", patch, scope=store.Scope.STATUS, strategic=True)
