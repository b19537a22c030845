"""The simulator's API as a watch cache and a condition writer use it, over real HTTP: paged
lists from one snapshot, 410 Expired continue tokens, watch bookmarks and resuming, strategic
merge patches of Node conditions, and the traffic counters a benchmark reads."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import lightkube
import pytest
from lightkube.resources.core_v1 import Node, NodeStatus, Pod
from lightkube.types import PatchType

from gpuguard.sim import paging, store
from tests.conftest import ServeStore, SimApi

pytestmark = pytest.mark.integration

PODS = "/api/v1/pods"
NODES = "/api/v1/nodes"
UNFINISHED = "status.phase!=Succeeded,status.phase!=Failed"
GPU_GONE = {"type": "GpuFallenOffBus", "status": "True", "reason": "GpuGoneFromBus",
            "message": "gpu=3 pci=0000:3b:00.0 xid=79; fell off the bus"}
KUBELET_READY = {"type": "Ready", "status": "True", "reason": "KubeletReady"}


def add_pod(s: store.ObjectStore, name: str, phase: str = "Running",
            namespace: str = "default") -> store.Obj:
    spec = {"nodeName": "gpu-1", "containers": [{"name": "main"}]}
    return s.create("Pod", namespace, {"metadata": {"name": name, "labels": {"app": "train"}},
                                       "spec": spec, "status": {"phase": phase}})


def add_node(s: store.ObjectStore, name: str, labels: dict[str, str] | None = None) -> store.Obj:
    status = {"conditions": [KUBELET_READY],
              "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}
    return s.create("Node", "", {"metadata": {"name": name, "labels": labels or {}},
                                 "spec": {}, "status": status})


@pytest.fixture
def raw(sim_api: SimApi) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sim_api.url, timeout=10) as c:
        yield c


def names(body: dict[str, Any]) -> list[str]:
    return [item["metadata"]["name"] for item in body["items"]]


def watch_lines(client: httpx.Client, path: str, **params: str) -> Iterator[dict[str, Any]]:
    """The watch's events as they arrive (the stream ends when the caller stops reading)."""
    with client.stream("GET", path, params={"watch": "true", **params}) as response:
        for line in response.iter_lines():
            yield json.loads(line)


# --- paged lists -----------------------------------------------------------------------------


def test_every_page_comes_from_the_first_pages_snapshot(sim_api: SimApi,
                                                        raw: httpx.Client) -> None:
    for name in ("p1", "p2", "p3", "p4", "p5"):
        add_pod(sim_api.store, name)

    first = raw.get(PODS, params={"limit": "2"}).json()
    add_pod(sim_api.store, "p0")  # sorts first: would shift an offset-based page
    sim_api.store.merge_patch("Pod", "default", "p3", {"metadata": {"labels": {"app": "x"}}})
    sim_api.store.delete("Pod", "default", "p4")
    second = raw.get(PODS, params={"limit": "2", "continue": first["metadata"]["continue"]}).json()
    third = raw.get(PODS, params={"limit": "2", "continue": second["metadata"]["continue"]}).json()

    assert [names(first), names(second), names(third)] == [["p1", "p2"], ["p3", "p4"], ["p5"]]
    assert second["items"][0]["metadata"]["labels"] == {"app": "train"}
    assert {page["metadata"]["resourceVersion"] for page in (first, second, third)} == {"5"}
    assert [first["metadata"]["remainingItemCount"], second["metadata"]["remainingItemCount"]] \
        == [3, 1]
    assert "continue" not in third["metadata"]


def test_lightkube_chunked_list_follows_continue_to_the_end(sim_api: SimApi) -> None:
    for i in range(7):
        add_pod(sim_api.store, f"p{i}", namespace=f"team-{i % 3}")

    with lightkube.Client(config=sim_api.config()) as client:
        listed = [p.metadata.name for p in client.list(Pod, namespace="*", chunk_size=3)]

    assert sorted(listed) == [f"p{i}" for i in range(7)]
    assert [r.query.get("limit") for r in sim_api.server.requests] == ["3", "3", "3"]


def test_a_namespaces_pages_hold_only_its_objects(sim_api: SimApi, raw: httpx.Client) -> None:
    for name in ("p1", "p2", "p3"):
        add_pod(sim_api.store, name, namespace="team-a")
    add_pod(sim_api.store, "p0", namespace="team-b")
    path = "/api/v1/namespaces/team-a/pods"

    first = raw.get(path, params={"limit": "2"}).json()
    rest = raw.get(path, params={"limit": "2", "continue": first["metadata"]["continue"]}).json()

    assert (names(first), names(rest)) == (["p1", "p2"], ["p3"])
    assert first["metadata"]["remainingItemCount"] == 1


def test_a_selector_filters_within_pages_and_counts_no_remaining_items(
    sim_api: SimApi, raw: httpx.Client
) -> None:
    for name, phase in (("a", "Running"), ("b", "Pending"), ("c", "Succeeded"),
                        ("d", "Failed"), ("e", "Succeeded")):
        add_pod(sim_api.store, name, phase)

    first = raw.get(PODS, params={"limit": "2", "fieldSelector": UNFINISHED}).json()
    rest = raw.get(PODS, params={"limit": "2", "fieldSelector": UNFINISHED,
                                 "continue": first["metadata"]["continue"]}).json()

    assert names(first) == ["a", "b"]
    assert "remainingItemCount" not in first["metadata"]  # it would count c, d, e
    assert (names(rest), rest["metadata"].get("continue")) == ([], None)


def test_a_continue_token_older_than_the_history_is_410_expired(
    serve_store: ServeStore,
) -> None:
    small = store.ObjectStore(history=3)
    for name in ("p1", "p2", "p3"):
        add_pod(small, name)
    api = serve_store(small)
    with httpx.Client(base_url=api.url) as raw:
        first = raw.get(PODS, params={"limit": "1"}).json()
        for phase in ("Pending", "Running", "Pending", "Running"):
            small.merge_patch("Pod", "default", "p3", {"status": {"phase": phase}})
        expired = raw.get(PODS, params={"limit": "1", "continue": first["metadata"]["continue"]})
        remainder = raw.get(PODS, params={"continue": expired.json()["metadata"]["continue"]})

    status = expired.json()
    assert (expired.status_code, status["reason"], status["code"]) == (410, "Expired", 410)
    assert status["message"] == paging.EXPIRED_MESSAGE
    assert names(remainder.json()) == ["p2", "p3"]  # the inconsistent rest, as of now
    assert remainder.json()["metadata"]["resourceVersion"] == str(small.resource_version)


def test_a_token_whose_snapshot_was_evicted_still_reads_its_resource_version(
    sim_api: SimApi, raw: httpx.Client
) -> None:
    for name in ("p1", "p2", "p3"):
        add_pod(sim_api.store, name)
    first = raw.get(PODS, params={"limit": "1"}).json()
    sim_api.store.delete("Pod", "default", "p2")
    for _ in range(store.SNAPSHOTS_KEPT):
        sim_api.store.create("ConfigMap", "default", {"metadata": {"generateName": "c-"}})
        raw.get(PODS, params={"limit": "1"})

    rest = raw.get(PODS, params={"continue": first["metadata"]["continue"]}).json()

    assert names(rest) == ["p2", "p3"]


@pytest.mark.parametrize(("token", "why"), [
    ("not base64!", "continue key is not valid"),
    (base64.urlsafe_b64encode(b'{"v":"meta.k8s.io/v2","rv":3,"start":"p\\u0000"}').decode(),
     "server does not recognize this encoded version meta.k8s.io/v2"),
    (base64.urlsafe_b64encode(b'{"v":"meta.k8s.io/v1","rv":0,"start":"p\\u0000"}').decode(),
     "incorrect encoded start resourceVersion"),
    (base64.urlsafe_b64encode(b'{"v":"meta.k8s.io/v1","rv":3,"start":"../x"}').decode(),
     "continue key is not valid: ../x"),
])
def test_a_malformed_continue_token_is_400(raw: httpx.Client, token: str, why: str) -> None:
    response = raw.get(PODS, params={"limit": "1", "continue": token})

    assert (response.status_code, response.json()["reason"]) == (400, "BadRequest")
    assert response.json()["message"].startswith("invalid continue token: ")
    assert why in response.json()["message"]


def test_continue_with_a_resource_version_is_400(sim_api: SimApi, raw: httpx.Client) -> None:
    add_pod(sim_api.store, "p1")
    add_pod(sim_api.store, "p2")
    token = raw.get(PODS, params={"limit": "1"}).json()["metadata"]["continue"]

    response = raw.get(PODS, params={"continue": token, "resourceVersion": "1"})

    assert response.status_code == 400
    assert "specifying resource version is not allowed when using continue" in response.text


def test_a_list_at_an_exact_resource_version_reads_the_past_or_is_410(
    serve_store: ServeStore,
) -> None:
    small = store.ObjectStore(history=3)
    add_pod(small, "p1")
    at = small.resource_version
    add_pod(small, "p2")
    api = serve_store(small)
    with httpx.Client(base_url=api.url) as raw:
        exact = raw.get(PODS, params={"resourceVersion": str(at),
                                      "resourceVersionMatch": "Exact"}).json()
        for name in ("p3", "p4", "p5"):
            add_pod(small, name)
        gone = raw.get(PODS, params={"resourceVersion": str(at), "limit": "10"})

    assert (names(exact), exact["metadata"]["resourceVersion"]) == (["p1"], str(at))
    assert (gone.status_code, gone.json()["reason"]) == (410, "Expired")
    assert gone.json()["message"] == "The resourceVersion for the provided list is too old."


# --- watches ---------------------------------------------------------------------------------


def test_a_watch_from_a_paged_lists_version_sees_exactly_the_later_changes(
    sim_api: SimApi, raw: httpx.Client
) -> None:
    add_pod(sim_api.store, "p1")
    add_pod(sim_api.store, "p2")
    first = raw.get(PODS, params={"limit": "1"}).json()
    add_pod(sim_api.store, "p3")  # after the list: not in its pages, in the watch
    rest = raw.get(PODS, params={"continue": first["metadata"]["continue"]}).json()
    sim_api.store.delete("Pod", "default", "p1")

    events = watch_lines(raw, PODS, resourceVersion=first["metadata"]["resourceVersion"])
    seen = [(e["type"], e["object"]["metadata"]["name"]) for e in (next(events), next(events))]

    assert names(first) + names(rest) == ["p1", "p2"]
    assert seen == [("ADDED", "p3"), ("DELETED", "p1")]


def test_bookmarks_come_at_the_servers_interval_with_only_the_resource_version(
    sim_api: SimApi, raw: httpx.Client
) -> None:
    add_node(sim_api.store, "gpu-1", {"pool": "a"})
    start = sim_api.store.resource_version
    add_node(sim_api.store, "gpu-2", {"pool": "b"})  # outside the selection: no event
    sim_api.server.bookmark_interval = 0.05

    events = watch_lines(raw, NODES, resourceVersion=str(start), labelSelector="pool=a",
                         allowWatchBookmarks="true", timeoutSeconds="10")
    bookmark = next(events)

    assert bookmark == {"type": "BOOKMARK", "object": {
        "kind": "Node", "apiVersion": "v1",
        "metadata": {"resourceVersion": str(sim_api.store.resource_version)}}}


def test_a_watch_gets_a_bookmark_two_seconds_before_its_timeout(
    sim_api: SimApi, raw: httpx.Client
) -> None:
    add_node(sim_api.store, "gpu-1")
    add_node(sim_api.store, "gpu-2")  # past where the watch starts: worth a bookmark

    events = watch_lines(raw, NODES, resourceVersion="1", allowWatchBookmarks="true",
                         timeoutSeconds="3")  # the default interval is a minute

    assert next(events)["type"] == "ADDED"
    assert next(events)["type"] == "BOOKMARK"


def test_an_idle_watch_gets_no_bookmark(sim_api: SimApi, raw: httpx.Client) -> None:
    """Nothing past the watch's resourceVersion: the real cacher sends no bookmark at all
    (held to a real API server in tests/realcluster/test_api_differential.py)."""
    add_node(sim_api.store, "gpu-1")

    events = watch_lines(raw, NODES, resourceVersion="1", allowWatchBookmarks="true",
                         timeoutSeconds="3")

    assert list(events) == []


def test_resuming_from_a_bookmark_avoids_the_410_of_a_compacted_version(
    serve_store: ServeStore,
) -> None:
    small = store.ObjectStore(history=4)
    add_node(small, "gpu-1", {"pool": "a"})
    start = small.resource_version
    api = serve_store(small)
    api.server.bookmark_interval = 0.05
    with httpx.Client(base_url=api.url, timeout=10) as raw:
        for i in range(3):
            add_node(small, f"other-{i}", {"pool": "b"})
        bookmarked = next(watch_lines(raw, NODES, resourceVersion=str(start),
                                      labelSelector="pool=a", allowWatchBookmarks="true"))
        for i in range(3):
            add_node(small, f"later-{i}", {"pool": "b"})
        small.merge_patch("Node", "", "gpu-1", {"metadata": {"labels": {"x": "y"}}})
        resumed = next(watch_lines(raw, NODES, labelSelector="pool=a",
                                   resourceVersion=bookmarked["object"]["metadata"]
                                   ["resourceVersion"]))
        stale = next(watch_lines(raw, NODES, labelSelector="pool=a", resourceVersion=str(start)))

    assert (resumed["type"], resumed["object"]["metadata"]["labels"]) == (
        "MODIFIED", {"pool": "a", "x": "y"})
    assert stale["type"] == "ERROR"
    assert (stale["object"]["code"], stale["object"]["reason"]) == (410, "Expired")
    assert stale["object"]["message"].startswith(f"too old resource version: {start} (")


def test_initial_events_end_with_an_annotated_bookmark(sim_api: SimApi,
                                                        raw: httpx.Client) -> None:
    add_node(sim_api.store, "gpu-1")
    add_node(sim_api.store, "gpu-2")

    events = watch_lines(raw, NODES, sendInitialEvents="true", allowWatchBookmarks="true",
                         resourceVersionMatch="NotOlderThan")
    first = [next(events) for _ in range(3)]

    assert [e["type"] for e in first] == ["ADDED", "ADDED", "BOOKMARK"]
    assert first[2]["object"]["metadata"] == {
        "resourceVersion": "2", "annotations": {"k8s.io/initial-events-end": "true"}}


def test_a_pod_that_finishes_leaves_the_unfinished_watch_as_deleted(
    sim_api: SimApi, raw: httpx.Client
) -> None:
    add_pod(sim_api.store, "p1")
    start = sim_api.store.resource_version
    sim_api.store.merge_patch("Pod", "default", "p1", {"status": {"phase": "Succeeded"}})

    event = next(watch_lines(raw, PODS, resourceVersion=str(start), fieldSelector=UNFINISHED))

    # as the watch cache sends it: the last state the watch selected, at the change's version
    assert (event["type"], event["object"]["status"]["phase"]) == ("DELETED", "Running")
    assert event["object"]["metadata"]["resourceVersion"] == str(start + 1)


# --- strategic merge patch -------------------------------------------------------------------


def test_a_strategic_status_patch_adds_a_condition_beside_the_kubelets(sim_api: SimApi) -> None:
    add_node(sim_api.store, "gpu-1")

    with lightkube.Client(config=sim_api.config()) as client:
        client.patch(NodeStatus, "gpu-1", {"status": {"conditions": [GPU_GONE]}},
                     patch_type=PatchType.STRATEGIC, field_manager="gpuguard-agent")
        cleared = {**GPU_GONE, "status": "False", "reason": "GpuBackOnBus"}
        client.patch(NodeStatus, "gpu-1", {"status": {"conditions": [cleared]},
                                           "spec": {"unschedulable": True}},
                     patch_type=PatchType.STRATEGIC)
        node = client.get(Node, "gpu-1")

    # a condition the node did not have goes first (``strategicpatch`` ``mergeSortedSlice``)
    assert [(c.type, c.status, c.reason) for c in node.status.conditions] == [
        ("GpuFallenOffBus", "False", "GpuBackOnBus"), ("Ready", "True", "KubeletReady")]
    assert node.spec.unschedulable is None  # the status subresource changes only status


def test_a_json_merge_patch_replaces_the_conditions_list(sim_api: SimApi,
                                                          raw: httpx.Client) -> None:
    add_node(sim_api.store, "gpu-1")

    raw.patch(f"{NODES}/gpu-1/status", json={"status": {"conditions": [GPU_GONE]}},
              headers={"Content-Type": "application/merge-patch+json"})

    conditions = sim_api.store.get("Node", "", "gpu-1")["status"]["conditions"]
    assert [c["type"] for c in conditions] == ["GpuFallenOffBus"]  # RFC 7386: lists replaced


def test_patch_delete_removes_one_condition_and_keeps_the_addresses(
    sim_api: SimApi, raw: httpx.Client
) -> None:
    add_node(sim_api.store, "gpu-1")
    smp = {"Content-Type": "application/strategic-merge-patch+json"}
    raw.patch(f"{NODES}/gpu-1/status", json={"status": {"conditions": [GPU_GONE]}}, headers=smp)

    response = raw.patch(f"{NODES}/gpu-1/status", headers=smp, json={"status": {
        "conditions": [{"type": "GpuFallenOffBus", "$patch": "delete"}],
        "addresses": [{"type": "Hostname", "address": "gpu-1"}]}})

    status = response.json()["status"]
    assert [c["type"] for c in status["conditions"]] == ["Ready"]
    assert [a["type"] for a in status["addresses"]] == ["Hostname", "InternalIP"]


def test_a_list_item_without_its_merge_key_is_400(sim_api: SimApi, raw: httpx.Client) -> None:
    add_node(sim_api.store, "gpu-1")

    response = raw.patch(f"{NODES}/gpu-1/status", json={"status": {"conditions": [{}]}},
                         headers={"Content-Type": "application/strategic-merge-patch+json"})

    assert response.status_code == 400
    assert "does not contain declared merge key: type" in response.json()["message"]


# --- traffic -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path", "verb"), [
    ("GET", "/api/v1/namespaces/default/pods", "list"),
    ("GET", "/apis/batch/v1/namespaces/default/jobs/j1", "get"),
    ("GET", "/apis/batch/v1/jobs", "list"),
    ("GET", "/api/v1/nodes/gpu-1/status", "get"),
    ("GET", "/api", "get"),
    ("PUT", "/api/v1/nodes/gpu-1", "update"),
    ("DELETE", "/api/v1/nodes/gpu-1", "delete"),
    ("POST", "/api/v1/namespaces/default/pods", "create"),
])
def test_requests_are_counted_under_the_api_servers_verb(
    sim_api: SimApi, raw: httpx.Client, method: str, path: str, verb: str
) -> None:
    raw.request(method, path, json={} if method in ("PUT", "POST") else None)

    assert [v for v, _, _ in sim_api.server.traffic().by_request] == [verb]


def test_traffic_counts_requests_and_bytes_per_verb_and_path(sim_api: SimApi,
                                                             raw: httpx.Client) -> None:
    add_node(sim_api.store, "gpu-1")
    raw.get("/version")
    sim_api.server.reset_traffic()
    before = sim_api.server.traffic()

    listed = raw.get(NODES)
    got = raw.get(f"{NODES}/gpu-1")
    raw.patch(f"{NODES}/gpu-1", json={"spec": {"unschedulable": True}},
              headers={"Content-Type": "application/merge-patch+json"})
    event = next(watch_lines(raw, NODES, resourceVersion="1"))
    after = sim_api.server.traffic()
    served = after - before

    assert {verb: u.requests for verb, u in served.by_verb.items()} == {
        "list": 1, "get": 1, "patch": 1, "watch": 1}
    assert len(listed.content) < served.verb("list").bytes < len(listed.content) + 300
    assert len(got.content) < served.by_path[f"{NODES}/gpu-1"].bytes
    assert served.verb("watch").bytes > len(json.dumps(event, separators=(",", ":")))
    assert served.total.requests == 4
    assert set(served.by_client) == {"python-httpx"}
    with pytest.raises(TypeError):
        after.by_request[("list", NODES, "x")] = before.total  # type: ignore[index]
