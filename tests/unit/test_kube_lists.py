"""Paged lists, watch streams and the cache's handling of them, against scripted API answers
(the chunking and bookmarks of https://kubernetes.io/docs/reference/using-api/api-concepts/,
which the simulator may not serve): every page is read, an expired continue token starts the
list again, a 410 is Expired, a BOOKMARK moves the cache's resourceVersion."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx2
import pytest
from lightkube.resources.core_v1 import Node, Pod

from gpuguard.clients import kube_lists
from gpuguard.errors import SourceError
from gpuguard.model import annotation_keys, fleet, node_conditions
from gpuguard.sim import kubeapi
from gpuguard.sources import kubernetes, watch_cache
from tests.integration.simnodes import node_info

Answer = Callable[[httpx2.Request], httpx2.Response]


def raw_api(answer: Answer) -> kube_lists.RawApi:
    config = kubeapi.lightkube_config("http://api.test").get()
    assert config is not None
    return kube_lists.RawApi(config, transport=httpx2.MockTransport(answer))


def node(name: str, rv: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv}, "status": {
        "capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}}}  # fmt: skip


def page(names: list[str], rv: str, token: str = "") -> httpx2.Response:
    meta = {"resourceVersion": rv, **({"continue": token} if token else {})}
    return httpx2.Response(200, json={"kind": "NodeList", "metadata": meta,
                                      "items": [node(n) for n in names]})  # fmt: skip


def gone(message: str) -> httpx2.Response:
    return httpx2.Response(410, json={"kind": "Status", "code": 410, "reason": "Expired",
                                      "message": message})  # fmt: skip


def test_a_list_reads_every_page_and_takes_the_resource_version_to_watch_from() -> None:
    asked: list[dict[str, str]] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        query = dict(request.url.params)
        asked.append(query)
        return {"": page(["a", "b"], "7", "t1"), "t1": page(["c", "d"], "7", "t2"),
                "t2": page(["e"], "7")}[query.get("continue", "")]  # fmt: skip

    listed = raw_api(answer).list_all(kube_lists.NODES, kubernetes.node_from_dict, page_size=2)
    assert [n.name for n in listed.items] == ["a", "b", "c", "d", "e"]
    assert (listed.resource_version, listed.pages) == ("7", 3)
    assert [q.get("continue") for q in asked] == [None, "t1", "t2"]
    assert {q["limit"] for q in asked} == {"2"}


def test_an_expired_continue_token_starts_the_list_again() -> None:
    answers = iter([page(["a"], "7", "t1"), gone("continue token expired"),
                    page(["a"], "9", "t1"), page(["b"], "9")])  # fmt: skip
    listed = raw_api(lambda _: next(answers)).list_all(kube_lists.NODES, kubernetes.node_from_dict)
    assert [n.name for n in listed.items] == ["a", "b"]
    assert listed.resource_version == "9"


def test_a_list_that_keeps_expiring_fails_naming_what_was_listed() -> None:
    with pytest.raises(SourceError, match="listing Nodes: the continue token expired"):
        raw_api(lambda r: page(["a"], "7", "t1") if "continue" not in r.url.params
                else gone("expired")).list_all(kube_lists.NODES, kubernetes.node_from_dict)


def test_an_answer_that_is_not_a_list_is_a_source_error() -> None:
    api = raw_api(lambda _: httpx2.Response(403, json={"kind": "Status", "code": 403,
                                                       "message": "nodes is forbidden"}))
    with pytest.raises(SourceError, match="listing Nodes: API error 403: nodes is forbidden"):
        api.list_all(kube_lists.NODES, kubernetes.node_from_dict)
    with pytest.raises(SourceError, match="not JSON"):
        raw_api(lambda _: httpx2.Response(200, text="<html>")).list_all(
            kube_lists.NODES, kubernetes.node_from_dict)


def stream(*events: dict[str, Any]) -> httpx2.Response:
    return httpx2.Response(200, content="".join(json.dumps(e) + "\n" for e in events).encode())


def test_a_watch_error_410_is_expired_and_other_errors_are_source_errors() -> None:
    expired = stream({"type": "ERROR", "object": {"kind": "Status", "code": 410,
                                                  "reason": "Expired", "message": "too old"}})
    with pytest.raises(kube_lists.Expired, match="watching Nodes from resourceVersion 5"):
        list(raw_api(lambda _: expired).watch(kube_lists.NODES, "5", 60))
    with pytest.raises(kube_lists.Expired):
        list(raw_api(lambda _: gone("too old")).watch(kube_lists.NODES, "5", 60))
    broken = stream({"type": "ERROR", "object": {"kind": "Status", "code": 500}})
    with pytest.raises(SourceError, match="ERROR 500") as error:
        list(raw_api(lambda _: broken).watch(kube_lists.NODES, "5", 60))
    assert not isinstance(error.value, kube_lists.Expired)


def test_only_the_declared_calls_are_sent() -> None:
    other = kube_lists.Resource("ConfigMap", "ConfigMaps", "/api/v1/configmaps")
    with pytest.raises(ValueError, match="RAW_CALLS"):
        raw_api(lambda _: page([], "1")).list_all(other, kubernetes.node_from_dict)


class Scripted:
    """Answers a cache's list, then one watch stream, then blocks further watches (the test
    ends the cache before that)."""

    def __init__(self, watch: httpx2.Response) -> None:
        self.watch = watch
        self.watches: list[dict[str, str]] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        query = dict(request.url.params)
        if query.get("watch") != "true":
            return page(["a", "b"], "10")
        self.watches.append(query)
        if len(self.watches) == 1:
            return self.watch
        return stream()  # an empty watch: the server ended it at once


def test_events_and_bookmarks_move_the_cache_and_its_resource_version() -> None:
    script = Scripted(stream(
        {"type": "MODIFIED", "object": node("a", "11") | {"spec": {"unschedulable": True}}},
        {"type": "DELETED", "object": node("b", "12")},
        {"type": "ADDED", "object": node("c", "13")},
        {"type": "BOOKMARK", "object": {"kind": "Node", "metadata": {"resourceVersion": "20"}}},
    ))  # fmt: skip
    cache = watch_cache.WatchCache(raw_api(script), kube_lists.NODES, kubernetes.node_from_dict)
    cache.start()
    try:
        assert cache.wait_until(lambda: len(script.watches) >= 2, 60)
    finally:
        cache.stop(60)
    assert {n.name: n.unschedulable for n in cache.values()} == {"a": True, "c": False}
    assert script.watches[0]["resourceVersion"] == "10"  # from the list
    assert script.watches[1]["resourceVersion"] == "20"  # resumed after the bookmark
    assert script.watches[0]["allowWatchBookmarks"] == "true"
    assert 300 <= int(script.watches[0]["timeoutSeconds"]) < 600
    assert cache.state().relists == 1


def test_a_node_is_read_from_its_json_with_gpuguards_conditions_and_mark_writers() -> None:
    obj = node("gpu-1", "42") | {"spec": {"unschedulable": True}}
    obj["metadata"]["managedFields"] = [{"manager": "gpuguard", "fieldsV1": {"f:metadata": {
        "f:annotations": {f"f:{annotation_keys.ISOLATED_AT}": {}}}}}]  # fmt: skip
    obj["status"] |= {"nodeInfo": node_info("gpu-1"), "conditions": [
        {"type": "Ready", "status": "True"},
        {"type": node_conditions.GPU_FALLEN_OFF_BUS, "status": "True",
         "reason": node_conditions.GONE_FROM_BUS, "message": "gpu=3 pci=0000:3b:00.0 xid=79; gone",
         "lastTransitionTime": "2026-09-21T06:05:00Z"}]}  # fmt: skip
    read = kubernetes.node_from_dict(obj)
    assert (read.name, read.resource_version, read.boot_id, read.unschedulable) == (
        "gpu-1", "42", "boot-gpu-1", True)
    assert read.ready
    assert read.isolation_writers == frozenset({"gpuguard"})
    fault = node_conditions.unambiguous_fault(read.gpu_conditions)
    assert fault is not None
    assert fault.gpus == (node_conditions.GpuNamed("3", "0000:3b:00.0", None, 79),)
    assert fault.last_transition == datetime(2026, 9, 21, 6, 5, tzinfo=UTC)
    assert kubernetes.node_from_api(Node.from_dict(obj)) == read  # one reading of a Node


def status(container: str, restarts: int) -> dict[str, Any]:
    return {"name": container, "image": "i", "imageID": "", "ready": True,
            "restartCount": restarts}  # fmt: skip


def test_a_pod_is_read_from_its_json() -> None:
    obj = {"metadata": {"name": "p", "namespace": "ns", "labels": {"a": "b"}},
           "spec": {"nodeName": "gpu-1", "containers": [
               {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}},
               {"name": "d", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]},
           "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                      "containerStatuses": [status("c", 3), status("d", 1)]}}  # fmt: skip
    read = kubernetes.pod_from_dict(obj)
    assert (read.node, read.phase, read.gpu_request, read.ready, read.restarts) == (
        "gpu-1", fleet.PodPhase.RUNNING, 3, True, 4)
    assert kubernetes.pod_from_api(Pod.from_dict(obj)) == read


def test_a_node_without_a_name_is_refused() -> None:
    with pytest.raises(SourceError, match=r"without metadata\.name"):
        kubernetes.node_from_dict({"metadata": {}})


def test_a_watch_silent_past_the_bookmark_period_ends_to_be_resumed() -> None:
    def silent(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ReadTimeout("no bookmark for 90 s", request=request)

    assert list(raw_api(silent).watch(kube_lists.NODES, "5", 60)) == []
