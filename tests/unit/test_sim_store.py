"""The simulator's object store: the semantics its API server promises.

resourceVersions only grow, a stale one is a conflict, merge patch ``null`` deletes, and
every write is replayable to watchers until the bounded history forgets it.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from gpuguard import errors
from gpuguard.sim import store
from gpuguard.sim.clock import SimClock

NODE = {"metadata": {"name": "gpu-1", "labels": {"pool": "a"}}, "spec": {}}


@pytest.fixture
def s() -> store.ObjectStore:
    return store.ObjectStore()


def rv(obj: store.Obj) -> int:
    return int(obj["metadata"]["resourceVersion"])


# --- writes ---------------------------------------------------------------------------------


def test_every_write_gets_a_strictly_greater_resource_version(s: store.ObjectStore) -> None:
    writes = [
        s.create("Node", "", NODE),
        s.create("Pod", "train", {"metadata": {"name": "p"}}),
        s.merge_patch("Node", "", "gpu-1", {"spec": {"unschedulable": True}}),
        s.replace("Pod", "train", "p", {"metadata": {"name": "p"}, "spec": {"x": 1}}),
        s.delete("Pod", "train", "p"),
    ]

    versions = [rv(w) for w in writes]
    assert versions == sorted(set(versions))
    assert s.resource_version == versions[-1]


def test_create_fills_server_metadata_from_the_given_clock() -> None:
    clock = SimClock(datetime(2026, 9, 1, 12, 30, tzinfo=UTC))
    s = store.ObjectStore(now=clock.now)

    node = s.create("Node", "", NODE)

    assert node["metadata"]["creationTimestamp"] == "2026-09-01T12:30:00Z"
    assert "generation" not in node["metadata"]  # a Node has none, as on a real API server
    assert node["metadata"]["uid"]
    assert "namespace" not in node["metadata"]


def test_generation_counts_spec_changes_only(s: store.ObjectStore) -> None:
    s.create("Job", "gpuguard", {**NODE, "spec": {"parallelism": 1}})

    relabelled = s.merge_patch("Job", "gpuguard", "gpu-1", {"metadata": {"labels": {"pool": "b"}}})
    suspended = s.merge_patch("Job", "gpuguard", "gpu-1", {"spec": {"suspend": True}})

    assert relabelled["metadata"]["generation"] == 1
    assert suspended["metadata"]["generation"] == 2
    assert "generation" not in s.create("Node", "", NODE)["metadata"]


def test_replace_keeps_identity_fields(s: store.ObjectStore) -> None:
    created = s.create("Node", "", NODE)

    replaced = s.replace("Node", "", "gpu-1", {"metadata": {"name": "gpu-1"}, "spec": {}})

    assert replaced["metadata"]["uid"] == created["metadata"]["uid"]
    assert replaced["metadata"]["creationTimestamp"] == created["metadata"]["creationTimestamp"]


def test_generate_name_gives_distinct_names(s: store.ObjectStore) -> None:
    job = {"metadata": {"generateName": "burn-in-"}}

    names = {s.create("Job", "gpuguard", job)["metadata"]["name"] for _ in range(3)}

    assert len(names) == 3
    assert all(n.startswith("burn-in-") and len(n) == len("burn-in-") + 5 for n in names)


def test_an_object_without_a_name_is_invalid(s: store.ObjectStore) -> None:
    with pytest.raises(store.StoreInvalid):
        s.create("Node", "", {"metadata": {}})


def test_creating_twice_is_already_exists(s: store.ObjectStore) -> None:
    s.create("Node", "", NODE)
    with pytest.raises(store.StoreAlreadyExists):
        s.create("Node", "", NODE)


@pytest.mark.parametrize("write", ["merge_patch", "replace"])
def test_a_stale_resource_version_is_a_conflict_and_changes_nothing(
    s: store.ObjectStore, write: str
) -> None:
    seen = s.create("Node", "", NODE)["metadata"]["resourceVersion"]
    s.merge_patch("Node", "", "gpu-1", {"metadata": {"annotations": {"human": "hold"}}})
    before = s.get("Node", "", "gpu-1")
    stale = {"metadata": {"name": "gpu-1", "resourceVersion": seen}, "spec": {"x": 1}}

    with pytest.raises(errors.ConflictError):
        getattr(s, write)("Node", "", "gpu-1", stale)

    assert s.get("Node", "", "gpu-1") == before


def test_the_current_resource_version_is_accepted(s: store.ObjectStore) -> None:
    current = s.create("Node", "", NODE)["metadata"]["resourceVersion"]

    patched = s.merge_patch(
        "Node", "", "gpu-1", {"metadata": {"resourceVersion": current}, "spec": {"x": 1}}
    )

    assert patched["spec"] == {"x": 1}


def test_merge_patch_null_deletes_a_key_and_keeps_its_siblings(s: store.ObjectStore) -> None:
    s.create("Node", "", {"metadata": {"name": "gpu-1", "annotations": {"a": "1", "b": "2"}}})

    patched = s.merge_patch("Node", "", "gpu-1", {"metadata": {"annotations": {"a": None}}})

    assert patched["metadata"]["annotations"] == {"b": "2"}


def test_missing_objects_are_not_found(s: store.ObjectStore) -> None:
    with pytest.raises(errors.NotFoundError):
        s.merge_patch("Node", "", "none", {})
    with pytest.raises(store.StoreNotFound):
        s.delete("Node", "", "none")


@pytest.mark.parametrize(
    ("scope", "expected_spec", "expected_status"),
    [
        pytest.param(store.Scope.WHOLE, {"x": 2}, {"phase": "b"}, id="world-writes-all"),
        pytest.param(store.Scope.MAIN, {"x": 2}, {"phase": "a"}, id="main-keeps-status"),
        pytest.param(store.Scope.STATUS, {"x": 1}, {"phase": "b"}, id="status-keeps-spec"),
    ],
)
def test_write_scope_protects_the_other_half(
    s: store.ObjectStore, scope: store.Scope, expected_spec: Any, expected_status: Any
) -> None:
    s.create("Pod", "ns", {"metadata": {"name": "p"}, "spec": {"x": 1}, "status": {"phase": "a"}})

    patched = s.merge_patch(
        "Pod", "ns", "p", {"spec": {"x": 2}, "status": {"phase": "b"}}, scope=scope
    )

    assert (patched["spec"], patched["status"]) == (expected_spec, expected_status)


def test_returned_objects_are_copies(s: store.ObjectStore) -> None:
    created = s.create("Node", "", NODE)
    created["metadata"]["labels"]["pool"] = "mutated"

    assert s.get("Node", "", "gpu-1")["metadata"]["labels"] == {"pool": "a"}


def test_list_filters_by_namespace_and_sorts(s: store.ObjectStore) -> None:
    for ns, name in [("b", "p2"), ("a", "p1"), ("b", "p0")]:
        s.create("Pod", ns, {"metadata": {"name": name}})

    assert [p["metadata"]["name"] for p in s.list("Pod")] == ["p1", "p0", "p2"]
    assert [p["metadata"]["name"] for p in s.list("Pod", "b")] == ["p0", "p2"]


# --- history for watchers -------------------------------------------------------------------


def test_changes_since_replays_later_writes_in_order(s: store.ObjectStore) -> None:
    start = rv(s.create("Node", "", NODE))
    s.merge_patch("Node", "", "gpu-1", {"spec": {"unschedulable": True}})
    s.delete("Node", "", "gpu-1")

    changes = s.changes_since(start)

    assert [c.type for c in changes] == [store.ChangeType.MODIFIED, store.ChangeType.DELETED]
    assert [c.resource_version for c in changes] == [start + 1, start + 2]
    assert changes[0].previous is not None
    assert "unschedulable" not in changes[0].previous["spec"]
    assert changes[0].object["spec"]["unschedulable"] is True


def test_a_resource_version_older_than_the_history_is_gone() -> None:
    s = store.ObjectStore(history=2)
    s.create("Node", "", NODE)
    for x in (1, 2, 3):
        s.merge_patch("Node", "", "gpu-1", {"spec": {"x": x}})

    with pytest.raises(store.StoreGone):
        s.changes_since(1)
    assert [c.resource_version for c in s.changes_since(2)] == [3, 4]


def test_changes_since_waits_for_a_write_from_another_thread(s: store.ObjectStore) -> None:
    start = rv(s.create("Node", "", NODE))
    writer = threading.Timer(0.05, s.merge_patch, ("Node", "", "gpu-1", {"spec": {"x": 1}}))
    writer.start()

    changes = s.changes_since(start, timeout=30)

    writer.join()
    assert [c.type for c in changes] == [store.ChangeType.MODIFIED]


def test_changes_since_returns_empty_after_its_timeout(s: store.ObjectStore) -> None:
    start = rv(s.create("Node", "", NODE))

    assert s.changes_since(start, timeout=0.01) == []


def test_the_world_can_backdate_what_it_seeds(s: store.ObjectStore) -> None:
    seeded = {"metadata": {"name": "gpu-1", "creationTimestamp": "2026-08-01T00:00:00Z"}}

    node = s.create("Node", "", seeded)

    assert node["metadata"]["creationTimestamp"] == "2026-08-01T00:00:00Z"


def test_managed_fields_follow_each_writer_as_the_api_server_records_them() -> None:
    """Update operations: the writer owns what it set or changed; a removed field is owned by
    nobody; a value written unchanged keeps its owner."""
    from gpuguard.sim import managed_fields

    objects = store.ObjectStore()
    objects.create("Node", "", {"metadata": {"name": "n"}, "spec": {}}, manager="kubelet")
    mark = ("metadata", "annotations", "gpuguard.io/isolated-at")
    cordon = ("spec", "unschedulable")
    patch = {"metadata": {"annotations": {"gpuguard.io/isolated-at": "t"}},
             "spec": {"unschedulable": True}}
    objects.merge_patch("Node", "", "n", patch, manager="gpuguard")
    node = objects.get("Node", "", "n")
    assert managed_fields.owners(node, mark) == managed_fields.owners(node, cordon) == {"gpuguard"}
    objects.merge_patch("Node", "", "n", {"spec": {"unschedulable": True}},
                        manager="kubectl-cordon")
    assert managed_fields.owners(objects.get("Node", "", "n"), cordon) == {"gpuguard"}
    objects.merge_patch("Node", "", "n", {"spec": {"unschedulable": None}},
                        manager="kubectl-uncordon")
    node = objects.get("Node", "", "n")
    assert managed_fields.owners(node, cordon) == set()
    assert managed_fields.owners(node, mark) == {"gpuguard"}
    objects.merge_patch("Node", "", "n", {"metadata": {"labels": {"x": "y"}}})
    assert objects.get("Node", "", "n")["metadata"]["managedFields"] == node["metadata"][
        "managedFields"], "the world's own writes are not API requests: nothing recorded"
