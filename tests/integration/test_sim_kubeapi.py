"""The simulator's Kubernetes API, driven over real HTTP by the real lightkube clients.

These are the guarantees gpuguard's adapters and leader elector rely on: selectors filter,
one merge patch cordons and annotates together, a stale resourceVersion is a 409, watches
deliver changes made by someone else, and errors are Kubernetes ``Status`` objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import lightkube
import pytest
from lightkube.models.batch_v1 import JobSpec
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.core_v1 import (
    Container,
    EventSource,
    ObjectReference,
    PodSpec,
    PodTemplateSpec,
)
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.batch_v1 import Job
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap, Event, Node, NodeStatus, Pod
from lightkube.types import PatchType

from gpuguard.sim import kubeapi, store
from tests.conftest import ServeStore, SimApi

pytestmark = pytest.mark.integration

CORDON_AND_ANNOTATE = {
    "spec": {"unschedulable": True},
    "metadata": {"annotations": {"gpuguard.io/reason": "xid-79"}},
}


def add_node(s: store.ObjectStore, name: str, labels: dict[str, str] | None = None) -> store.Obj:
    return s.create("Node", "", {"metadata": {"name": name, "labels": labels or {}}, "spec": {}})


def add_pod(s: store.ObjectStore, namespace: str, name: str, node: str, phase: str) -> None:
    spec = {"nodeName": node, "containers": [{"name": "main", "image": "trainer"}]}
    s.create(
        "Pod", namespace, {"metadata": {"name": name}, "spec": spec, "status": {"phase": phase}}
    )


@pytest.fixture
def client(sim_api: SimApi) -> Iterator[lightkube.Client]:
    with lightkube.Client(config=sim_api.config()) as c:
        yield c


@pytest.fixture
async def async_client(sim_api: SimApi) -> AsyncIterator[lightkube.AsyncClient]:
    async with lightkube.AsyncClient(config=sim_api.config()) as c:
        yield c


@pytest.fixture
def raw(sim_api: SimApi) -> Iterator[httpx.Client]:
    """Plain HTTP, to check the wire format lightkube hides."""
    with httpx.Client(base_url=sim_api.url) as c:
        yield c


# --- reading -------------------------------------------------------------------------------


def test_sync_list_nodes_by_label_selector(sim_api: SimApi, client: lightkube.Client) -> None:
    add_node(sim_api.store, "gpu-1", {"nvidia.com/gpu.present": "true"})
    add_node(sim_api.store, "gpu-2", {"nvidia.com/gpu.present": "true", "pool": "burn-in"})
    add_node(sim_api.store, "cpu-1")

    gpu_nodes = client.list(Node, labels={"nvidia.com/gpu.present": "true"})
    not_burnin = client.list(Node, labels={"nvidia.com/gpu.present": "true", "pool": None})

    assert [n.metadata.name for n in gpu_nodes] == ["gpu-1", "gpu-2"]
    assert [n.metadata.name for n in not_burnin] == ["gpu-2"]


async def test_async_list_nodes_by_label_selector(
    sim_api: SimApi, async_client: lightkube.AsyncClient
) -> None:
    add_node(sim_api.store, "gpu-1", {"nvidia.com/gpu.present": "true"})
    add_node(sim_api.store, "cpu-1")

    names = [
        n.metadata.name
        async for n in async_client.list(Node, labels={"nvidia.com/gpu.present": "true"})
    ]

    assert names == ["gpu-1"]


def test_get_returns_the_object_with_server_filled_metadata(
    sim_api: SimApi, client: lightkube.Client
) -> None:
    add_node(sim_api.store, "gpu-1")

    node = client.get(Node, "gpu-1")

    assert node.metadata.name == "gpu-1"
    assert node.metadata.uid
    assert node.metadata.creationTimestamp is not None
    assert node.metadata.resourceVersion == str(sim_api.store.resource_version)


def test_get_of_a_missing_object_is_a_404_api_error(client: lightkube.Client) -> None:
    with pytest.raises(lightkube.ApiError) as caught:
        client.get(Node, "no-such-node")
    assert caught.value.status.code == 404
    assert caught.value.status.reason == "NotFound"


def test_list_pods_by_node_name_field_across_namespaces(
    sim_api: SimApi, client: lightkube.Client
) -> None:
    add_pod(sim_api.store, "train", "llm-0", node="gpu-1", phase="Running")
    add_pod(sim_api.store, "infer", "svc-0", node="gpu-1", phase="Succeeded")
    add_pod(sim_api.store, "train", "llm-1", node="gpu-2", phase="Running")

    on_gpu_1 = client.list(Pod, namespace="*", fields={"spec.nodeName": "gpu-1"})
    running_in_train = client.list(
        Pod, namespace="train", fields={"status.phase": "Running", "spec.nodeName": "gpu-1"}
    )

    assert sorted(p.metadata.name for p in on_gpu_1) == ["llm-0", "svc-0"]
    assert [p.metadata.name for p in running_in_train] == ["llm-0"]


def test_a_field_selector_the_real_api_rejects_is_a_400(client: lightkube.Client) -> None:
    with pytest.raises(lightkube.ApiError) as caught:
        list(client.list(Node, fields={"spec.nodeName": "gpu-1"}))
    assert caught.value.status.code == 400


def test_list_response_carries_kinds_and_the_resource_version(
    sim_api: SimApi, raw: httpx.Client
) -> None:
    add_node(sim_api.store, "gpu-1")

    body = raw.get("/api/v1/nodes").json()

    assert body["kind"] == "NodeList"
    assert body["apiVersion"] == "v1"
    assert body["metadata"]["resourceVersion"] == str(sim_api.store.resource_version)
    # the items are bare, as the API server lists them: the list names their kind
    assert [sorted(i) for i in body["items"]] == [["metadata", "spec"]]


# --- writing -------------------------------------------------------------------------------


def test_one_merge_patch_cordons_and_annotates_together(
    sim_api: SimApi, client: lightkube.Client
) -> None:
    add_node(sim_api.store, "gpu-1")

    node = client.patch(Node, "gpu-1", CORDON_AND_ANNOTATE, patch_type=PatchType.MERGE)

    assert node.spec.unschedulable is True
    assert node.metadata.annotations == {"gpuguard.io/reason": "xid-79"}
    assert client.get(Node, "gpu-1").metadata.annotations == {"gpuguard.io/reason": "xid-79"}


async def test_async_merge_patch_cordons_and_annotates_together(
    sim_api: SimApi, async_client: lightkube.AsyncClient
) -> None:
    add_node(sim_api.store, "gpu-1")

    node = await async_client.patch(Node, "gpu-1", CORDON_AND_ANNOTATE, patch_type=PatchType.MERGE)

    assert node.spec.unschedulable is True
    assert node.metadata.annotations == {"gpuguard.io/reason": "xid-79"}


def test_lightkubes_default_strategic_merge_patch_cordons(
    sim_api: SimApi, client: lightkube.Client
) -> None:
    add_node(sim_api.store, "gpu-1")

    node = client.patch(Node, "gpu-1", {"spec": {"unschedulable": True}})

    assert node.spec.unschedulable is True


def test_merge_patch_with_a_stale_resource_version_is_a_409_conflict(
    sim_api: SimApi, client: lightkube.Client
) -> None:
    seen = add_node(sim_api.store, "gpu-1")["metadata"]["resourceVersion"]
    sim_api.store.merge_patch("Node", "", "gpu-1", {"metadata": {"labels": {"human": "cordon"}}})
    stale_patch = {**CORDON_AND_ANNOTATE, "metadata": {"resourceVersion": seen}}

    with pytest.raises(lightkube.ApiError) as caught:
        client.patch(Node, "gpu-1", stale_patch, patch_type=PatchType.MERGE)

    assert caught.value.status.code == 409
    assert caught.value.status.reason == "Conflict"
    assert "unschedulable" not in sim_api.store.get("Node", "", "gpu-1")["spec"]


async def test_async_merge_patch_with_a_stale_resource_version_is_a_409_conflict(
    sim_api: SimApi, async_client: lightkube.AsyncClient
) -> None:
    seen = add_node(sim_api.store, "gpu-1")["metadata"]["resourceVersion"]
    sim_api.store.merge_patch("Node", "", "gpu-1", {"spec": {"unschedulable": True}})

    with pytest.raises(lightkube.ApiError) as caught:
        await async_client.patch(
            Node, "gpu-1", {"metadata": {"resourceVersion": seen}}, patch_type=PatchType.MERGE
        )

    assert caught.value.status.code == 409


def test_node_status_is_written_only_through_the_status_subresource(
    sim_api: SimApi, client: lightkube.Client
) -> None:
    add_node(sim_api.store, "gpu-1")
    ready = {"conditions": [{"type": "Ready", "status": "True"}]}

    client.patch(Node, "gpu-1", {"status": ready}, patch_type=PatchType.MERGE)
    ignored = sim_api.store.get("Node", "", "gpu-1")
    client.patch(NodeStatus, "gpu-1", {"status": ready}, patch_type=PatchType.MERGE)
    written = sim_api.store.get("Node", "", "gpu-1")

    assert "status" not in ignored
    assert written["status"] == ready


def test_job_is_created_and_read_back(client: lightkube.Client) -> None:
    job = Job(
        metadata=ObjectMeta(name="evidence-gpu-1", namespace="gpuguard"),
        spec=JobSpec(
            template=PodTemplateSpec(
                spec=PodSpec(
                    nodeName="gpu-1",
                    restartPolicy="Never",
                    containers=[Container(name="evidence", image="gpuguard:test")],
                )
            )
        ),
    )

    created = client.create(job)
    read = client.get(Job, "evidence-gpu-1", namespace="gpuguard")

    assert created.metadata.uid == read.metadata.uid
    assert read.metadata.generation == 1
    assert read.spec.template.spec.nodeName == "gpu-1"


def test_creating_an_existing_object_is_a_409_already_exists(client: lightkube.Client) -> None:
    lease = Lease(metadata=ObjectMeta(name="gpuguard", namespace="gpuguard"))
    client.create(lease)

    with pytest.raises(lightkube.ApiError) as caught:
        client.create(lease)

    assert caught.value.status.code == 409
    assert caught.value.status.reason == "AlreadyExists"


def test_lease_replace_with_a_stale_resource_version_is_a_409_conflict(
    client: lightkube.Client,
) -> None:
    created = client.create(
        Lease(
            metadata=ObjectMeta(name="gpuguard-leader", namespace="gpuguard"),
            spec=LeaseSpec(holderIdentity="replica-a", leaseDurationSeconds=15),
        )
    )
    renewed = client.replace(
        Lease(metadata=created.metadata, spec=LeaseSpec(holderIdentity="replica-a"))
    )

    with pytest.raises(lightkube.ApiError) as caught:
        client.replace(Lease(metadata=created.metadata, spec=LeaseSpec(holderIdentity="replica-b")))

    assert int(renewed.metadata.resourceVersion) > int(created.metadata.resourceVersion)
    assert caught.value.status.code == 409
    current = client.get(Lease, "gpuguard-leader", namespace="gpuguard")
    assert current.spec.holderIdentity == "replica-a"


def test_event_is_created_in_a_namespace_and_found_by_its_object(
    client: lightkube.Client,
) -> None:
    client.create(
        Event(
            metadata=ObjectMeta(name="gpu-1.isolated", namespace="gpuguard"),
            involvedObject=ObjectReference(kind="Node", name="gpu-1"),
            reason="Isolated",
            message="xid 79 and GPU loss held 10m",
            source=EventSource(component="gpuguard"),
        )
    )

    events = client.list(Event, namespace="gpuguard", fields={"involvedObject.name": "gpu-1"})
    elsewhere = client.list(Event, namespace="default")

    assert [e.reason for e in events] == ["Isolated"]
    assert list(elsewhere) == []


def test_delete_removes_the_object(sim_api: SimApi, client: lightkube.Client) -> None:
    add_node(sim_api.store, "gpu-1")

    client.delete(Node, "gpu-1")

    assert sim_api.store.list("Node") == []


def test_json_patch_applies_and_a_failed_test_refuses_it_whole(
    sim_api: SimApi, client: lightkube.Client
) -> None:
    add_node(sim_api.store, "gpu-1")
    cordon = [{"op": "add", "path": "/spec/unschedulable", "value": True},
              {"op": "add", "path": "/metadata/labels/a~1b", "value": "c"}]
    refused = [{"op": "add", "path": "/metadata/labels/x", "value": "y"},
               {"op": "test", "path": "/spec/unschedulable", "value": False}]

    patched = client.patch(Node, "gpu-1", cordon, patch_type=PatchType.JSON)
    with pytest.raises(lightkube.ApiError) as caught:
        client.patch(Node, "gpu-1", refused, patch_type=PatchType.JSON)

    assert patched.spec is not None
    assert patched.spec.unschedulable is True
    assert patched.metadata is not None
    assert patched.metadata.labels == {"a/b": "c"}
    assert caught.value.status.code == 422
    assert "x" not in (sim_api.store.get("Node", "", "gpu-1")["metadata"]["labels"])


def test_server_side_apply_creates_owns_and_conflicts(raw: httpx.Client) -> None:
    path = "/api/v1/namespaces/gpuguard/configmaps/applied"
    config = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: applied}\ndata: {k: v}\n"
    apply = {"Content-Type": "application/apply-patch+yaml"}

    created = raw.patch(f"{path}?fieldManager=one", content=config, headers=apply)
    taken = raw.patch(f"{path}?fieldManager=two", content=config.replace("k: v", "k: w"),
                      headers=apply)

    assert created.status_code == 201
    assert created.json()["metadata"]["managedFields"][0]["operation"] == "Apply"
    assert (taken.status_code, taken.json()["message"]) == (
        409, 'Apply failed with 1 conflict: conflict with "one": .data.k')


def test_an_error_after_a_watch_on_the_same_connection_is_answered(
    sim_api: SimApi, raw: httpx.Client
) -> None:
    """A kept-alive connection that streamed a watch answers its next request's error with a
    Status, not a dropped connection."""
    with raw.stream("GET", "/api/v1/nodes", params={"watch": "1", "timeoutSeconds": "1"}) as w:
        list(w.iter_lines())

    missing = raw.get("/api/v1/nodes/none")

    assert (missing.status_code, missing.json()["message"]) == (404, 'nodes "none" not found')


@pytest.mark.parametrize(
    ("method", "path", "code", "reason"),
    [
        pytest.param("GET", "/api/v1/nodes/none", 404, "NotFound", id="missing-object"),
        pytest.param("GET", "/apis/apps/v1/deployments", 404, "NotFound", id="unserved-kind"),
        pytest.param("POST", "/api/v1/pods", 405, "MethodNotAllowed", id="create-without-ns"),
        pytest.param(
            "GET", "/api/v1/nodes?labelSelector=a+in+(", 400, "BadRequest", id="bad-selector"
        ),
    ],
)
def test_errors_are_kubernetes_status_objects(
    raw: httpx.Client, method: str, path: str, code: int, reason: str
) -> None:
    response = raw.request(method, path, json={"metadata": {"name": "x"}})

    assert response.status_code == code
    assert response.headers["Content-Type"] == "application/json"
    body = response.json()
    assert (body["kind"], body["apiVersion"], body["status"]) == ("Status", "v1", "Failure")
    assert (body["code"], body["reason"]) == (code, reason)


# --- watching ------------------------------------------------------------------------------


def cordon_in_thread(sim_api: SimApi, name: str) -> threading.Thread:
    def cordon() -> None:
        with lightkube.Client(config=sim_api.config()) as other:
            other.patch(Node, name, {"spec": {"unschedulable": True}}, patch_type=PatchType.MERGE)

    writer = threading.Thread(target=cordon)
    writer.start()
    return writer


def test_sync_watch_receives_a_change_made_from_another_thread(
    sim_api: SimApi, client: lightkube.Client
) -> None:
    add_node(sim_api.store, "gpu-1", {"nvidia.com/gpu.present": "true"})
    add_node(sim_api.store, "cpu-1")
    seen: list[tuple[str, str]] = []
    writer = None

    for event_type, node in client.watch(Node, labels={"nvidia.com/gpu.present": "true"}):
        seen.append((event_type, node.metadata.name))
        if writer is None:
            writer = cordon_in_thread(sim_api, "gpu-1")
        if event_type == "MODIFIED":
            break

    assert writer is not None
    writer.join()
    assert seen == [("ADDED", "gpu-1"), ("MODIFIED", "gpu-1")]
    assert node.spec.unschedulable is True


async def test_async_watch_receives_a_change_made_from_another_task(
    sim_api: SimApi, async_client: lightkube.AsyncClient
) -> None:
    add_node(sim_api.store, "gpu-1")
    writer: asyncio.Task[Any] | None = None
    seen: list[tuple[str, Node]] = []

    async with contextlib.aclosing(async_client.watch(Node)) as events:
        async for event_type, node in events:
            seen.append((event_type, node))
            if writer is None:
                writer = asyncio.create_task(
                    async_client.patch(
                        Node, "gpu-1", CORDON_AND_ANNOTATE, patch_type=PatchType.MERGE
                    )
                )
            if event_type == "MODIFIED":
                break

    assert writer is not None
    await writer
    assert [event_type for event_type, _ in seen] == ["ADDED", "MODIFIED"]
    assert seen[-1][1].metadata.annotations == {"gpuguard.io/reason": "xid-79"}


def test_watch_from_a_resource_version_replays_only_later_changes(
    sim_api: SimApi, client: lightkube.Client
) -> None:
    add_node(sim_api.store, "gpu-1")
    listed = client.list(Node)
    assert [n.metadata.name for n in listed] == ["gpu-1"]
    sim_api.store.merge_patch("Node", "", "gpu-1", {"spec": {"unschedulable": True}})
    sim_api.store.delete("Node", "", "gpu-1")

    events = client.watch(Node, resource_version=listed.resourceVersion)
    replayed = [(next(events)[0]), (next(events)[0])]

    assert replayed == ["MODIFIED", "DELETED"]


def test_a_node_leaving_the_label_selection_is_seen_as_deleted(
    sim_api: SimApi, client: lightkube.Client
) -> None:
    rv = add_node(sim_api.store, "gpu-1", {"pool": "serving"})["metadata"]["resourceVersion"]
    sim_api.store.merge_patch("Node", "", "gpu-1", {"metadata": {"labels": {"pool": "repair"}}})

    events = client.watch(Node, labels={"pool": "serving"}, resource_version=rv)
    event_type, node = next(events)

    # the node as the watch last selected it, as the real watch cache sends it
    assert (event_type, node.metadata.labels) == ("DELETED", {"pool": "serving"})


def test_watch_from_a_compacted_resource_version_is_410_gone(serve_store: ServeStore) -> None:
    small = store.ObjectStore(history=2)
    add_node(small, "gpu-1")
    for unschedulable in (True, False, True):
        small.merge_patch("Node", "", "gpu-1", {"spec": {"unschedulable": unschedulable}})
    api = serve_store(small)

    with (
        lightkube.Client(config=api.config()) as client,
        pytest.raises(lightkube.ApiError) as caught,
    ):
        next(client.watch(Node, resource_version="1"))

    assert caught.value.status.code == 410


def test_watch_ends_after_timeout_seconds(sim_api: SimApi, raw: httpx.Client) -> None:
    add_node(sim_api.store, "gpu-1")

    response = raw.get("/api/v1/nodes", params={"watch": "true", "timeoutSeconds": "1"})

    assert response.headers["Transfer-Encoding"] == "chunked"
    assert [json.loads(line)["type"] for line in response.text.splitlines()] == ["ADDED"]


def test_stopping_the_server_ends_an_open_watch() -> None:
    watching, watch_ended = threading.Event(), threading.Event()

    def watch_forever(url: str) -> None:
        with httpx.Client(base_url=url) as c, c.stream("GET", "/api/v1/nodes?watch=1") as r:
            for _ in r.iter_lines():
                watching.set()
        watch_ended.set()

    with kubeapi.serve(store.ObjectStore()) as server:
        add_node(server.store, "gpu-1")
        watcher = threading.Thread(target=watch_forever, args=(server.url,))
        watcher.start()
        assert watching.wait(timeout=30)

    watcher.join(timeout=30)
    assert watch_ended.is_set()


def test_a_refused_request_leaves_the_keep_alive_connection_usable(
    sim_api: SimApi, raw: httpx.Client
) -> None:
    add_node(sim_api.store, "gpu-1")

    refused = raw.post("/apis/apps/v1/namespaces/x/deployments", json={"metadata": {}})
    listed = raw.get("/api/v1/nodes")

    assert refused.status_code == 404
    assert [i["metadata"]["name"] for i in listed.json()["items"]] == ["gpu-1"]


def test_create_over_http_ignores_client_set_server_fields(raw: httpx.Client) -> None:
    forged = {
        "metadata": {"name": "gpu-1", "uid": "forged", "creationTimestamp": "2001-01-01T00:00:00Z"}
    }

    created = raw.post("/api/v1/nodes", json=forged).json()

    assert created["metadata"]["uid"] != "forged"
    assert created["metadata"]["creationTimestamp"] != "2001-01-01T00:00:00Z"


def test_watch_pods_by_node_sees_only_pods_bound_there(
    sim_api: SimApi, client: lightkube.Client
) -> None:
    rv = str(sim_api.store.resource_version)
    add_pod(sim_api.store, "train", "elsewhere", node="gpu-2", phase="Pending")
    add_pod(sim_api.store, "train", "here", node="gpu-1", phase="Pending")

    events = client.watch(
        Pod, namespace="*", fields={"spec.nodeName": "gpu-1"}, resource_version=rv
    )
    event_type, pod = next(events)

    assert (event_type, pod.metadata.name) == ("ADDED", "here")


# --- what tests of the adapters need -------------------------------------------------------


def test_requests_are_recorded_with_their_patch_body(
    sim_api: SimApi, client: lightkube.Client
) -> None:
    add_node(sim_api.store, "gpu-1")

    client.patch(Node, "gpu-1", CORDON_AND_ANNOTATE, patch_type=PatchType.MERGE)

    [patch] = sim_api.server.requests
    assert (patch.method, patch.path) == ("PATCH", "/api/v1/nodes/gpu-1")
    assert patch.content_type == "application/merge-patch+json"
    assert patch.body == CORDON_AND_ANNOTATE


def test_an_injected_failure_answers_once_then_the_store_serves(
    sim_api: SimApi, client: lightkube.Client
) -> None:
    add_node(sim_api.store, "gpu-1")
    sim_api.server.fail_next("PATCH", "/api/v1/nodes/gpu-1", 503, "ServiceUnavailable")

    with pytest.raises(lightkube.ApiError) as caught:
        client.patch(Node, "gpu-1", CORDON_AND_ANNOTATE, patch_type=PatchType.MERGE)
    retried = client.patch(Node, "gpu-1", CORDON_AND_ANNOTATE, patch_type=PatchType.MERGE)

    assert (caught.value.status.code, caught.value.status.reason) == (503, "ServiceUnavailable")
    assert retried.spec.unschedulable is True


@pytest.mark.parametrize(
    ("version", "major", "minor"),
    [
        pytest.param("v1.31.4+rke2r1", "1", "31", id="rke2-1.31-cluster"),
        pytest.param("v1.35.0+rke2r1", "1", "35", id="aug7-control-plane-upgraded-first"),
    ],
)
def test_version_answers_like_a_real_api_server_and_follows_an_upgrade(
    version: str, major: str, minor: str
) -> None:
    with kubeapi.serve(store.ObjectStore(), version=version) as server, httpx.Client(
        base_url=server.url
    ) as c:
        served = c.get("/version")
        server.version = "v1.36.1+rke2r1"
        upgraded = c.get("/version").json()

    assert served.status_code == 200
    assert served.headers["content-type"] == "application/json"
    body = served.json()
    assert (body["major"], body["minor"], body["gitVersion"]) == (major, minor, version)
    assert body["platform"] == "linux/amd64"
    assert (upgraded["minor"], upgraded["gitVersion"]) == ("36", "v1.36.1+rke2r1")


def test_the_api_server_refuses_a_configmap_over_1_mib_and_annotations_over_256_kib(
    sim_api: SimApi, client: lightkube.Client
) -> None:
    add_node(sim_api.store, "gpu-node-a")
    big = ConfigMap.from_dict(
        {"metadata": {"name": "gpuguard-ledger-2026-09-0", "namespace": "gpuguard"},
         "data": {"gpu-node-a": "x" * (1024 * 1024)}}
    )
    with pytest.raises(lightkube.ApiError) as refused_map:
        client.create(big, namespace="gpuguard")
    patch = {"metadata": {"annotations": {"gpuguard.io/request": "y" * (256 * 1024)}}}
    with pytest.raises(lightkube.ApiError) as refused_node:
        client.patch(Node, "gpu-node-a", patch, patch_type=PatchType.MERGE)
    assert refused_map.value.status.code == 422
    assert refused_map.value.status.message == (
        'ConfigMap "gpuguard-ledger-2026-09-0" is invalid: []: Too long: '
        "must have at most 1048576 bytes"
    )
    assert refused_node.value.status.code == 422
    assert refused_node.value.status.message == (
        'Node "gpu-node-a" is invalid: metadata.annotations: Too long: '
        "must have at most 262144 bytes"
    )
    assert "gpuguard.io/request" not in (sim_api.store.get("Node", "", "gpu-node-a")["metadata"]
                                          .get("annotations") or {})
