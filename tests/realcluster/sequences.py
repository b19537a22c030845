"""The request sequences the differential test sends to the simulator's API and a real one.

Each is a function of an ``Api`` and a namespace of its own that records its observations
(``Api.ask`` / ``Api.see``); it must not depend on which server it talks to, except through
``Api.expire`` (a compaction) and ``Api.make_namespace``. What each step checks is said in
its step name; the Kubernetes documentation it follows is cited in the docstring.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.realcluster.differential import (
    APPLY,
    JSON_PATCH,
    MERGE,
    STRATEGIC,
    TABLE,
    Api,
    events,
    names,
)

Sequence = Callable[[Api, str], None]


def _cms(ns: str) -> str:
    return f"/api/v1/namespaces/{ns}/configmaps"


def _configmap(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "data": {"name": name}}


def _listing(answer: Any) -> Any:
    """What a client reads of a list: kind, metadata (continue, remainingItemCount), names."""
    if not isinstance(answer, dict) or "items" not in answer:
        return answer
    return {"kind": answer.get("kind"), "apiVersion": answer.get("apiVersion"),
            "metadata": answer.get("metadata"), "names": names(answer)}  # fmt: skip


def _seed(api: Api, ns: str, count: int = 5) -> None:
    api.make_namespace(api, ns)
    for i, name in enumerate("abcdefgh"[:count]):
        labels = {"tier": "odd" if i % 2 else "even", "set": ns}
        code, _ = api.call("POST", _cms(ns), _configmap(f"cm-{name}", **labels))
        api.see(f"create cm-{name}", code)


def _page(api: Api, step: str, path: str) -> Any:
    code, answer = api.call("GET", path)
    api.see(step, (code, _listing(answer)))
    return answer


def _next(ns: str, answer: Any) -> str:
    """The next page of 2 after ``answer`` (a page or a 410 Status with its token)."""
    return f"{_cms(ns)}?limit=2&continue={answer['metadata']['continue']}"


def paged_list(api: Api, ns: str) -> None:
    """limit/continue: every page read at the first page's resourceVersion, so a create and
    a delete between pages do not show; remainingItemCount counts what is left
    (https://kubernetes.io/docs/reference/using-api/api-concepts/#retrieving-large-results-sets-in-chunks)."""
    _seed(api, ns)
    first = _page(api, "page 1 of 2 items", f"{_cms(ns)}?limit=2")
    api.call("POST", _cms(ns), _configmap("cm-bb"))
    api.call("DELETE", f"{_cms(ns)}/cm-e")
    second = _page(api, "page 2: consistent", _next(ns, first))
    _page(api, "page 3: the last", _next(ns, second))
    _page(api, "a new list sees the writes", _cms(ns))
    _page(api, "limit=-1 lists everything", f"{_cms(ns)}?limit=-1")
    _page(api, "limit=0 lists everything", f"{_cms(ns)}?limit=0")


def paged_list_selected(api: Api, ns: str) -> None:
    """With a selector a page holds up to ``limit`` matching items and no remainingItemCount
    (it would count the non-matching); across namespaces the token's key has the namespace."""
    _seed(api, ns, 7)
    first = _page(api, "selected page 1", f"{_cms(ns)}?limit=2&labelSelector=tier%3Deven")
    _page(api, "selected page 2", f"{_cms(ns)}?limit=2&labelSelector=tier%3Deven"
                                  f"&continue={first['metadata']['continue']}")
    everywhere = f"/api/v1/configmaps?limit=3&labelSelector=set%3D{ns}"
    first = _page(api, "across namespaces page 1", everywhere)
    _page(api, "across namespaces page 2", f"{everywhere}&continue={first['metadata']['continue']}")


def list_errors(api: Api, ns: str) -> None:
    """What a malformed list request is answered (400 Status bodies)."""
    _seed(api, ns, 3)
    first = _page(api, "page 1", f"{_cms(ns)}?limit=1")
    token = first["metadata"]["continue"]
    api.ask("garbage continue token", "GET", f"{_cms(ns)}?limit=1&continue=abc")
    api.ask("continue with a resourceVersion", "GET",
            f"{_cms(ns)}?limit=1&continue={token}&resourceVersion=5")
    api.ask("limit not a number", "GET", f"{_cms(ns)}?limit=x")
    for plural, path in (("configmaps", _cms(ns)), ("nodes", "/api/v1/nodes"),
                         ("jobs", f"/apis/batch/v1/namespaces/{ns}/jobs"),
                         ("leases", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases")):
        api.ask(f"unknown field selector on {plural}", "GET", f"{path}?fieldSelector=spec.nope%3D1")


def expired_continue(api: Api, ns: str) -> None:
    """A continue token older than the compaction: 410 Expired with a token that continues
    from now (an inconsistent remainder); a list at a compacted resourceVersion: 410."""
    _seed(api, ns)
    first = _page(api, "page 1", f"{_cms(ns)}?limit=2")
    api.call("DELETE", f"{_cms(ns)}/cm-d")
    api.expire(api)
    expired = api.ask("continue after compaction", "GET",
                      f"{_cms(ns)}?limit=2&continue={first['metadata']['continue']}")
    _page(api, "the inconsistent remainder", _next(ns, expired))
    api.ask("list at a compacted resourceVersion", "GET",
            f"{_cms(ns)}?limit=2&resourceVersion={first['metadata']['resourceVersion']}"
            "&resourceVersionMatch=Exact")


def watch_expired(api: Api, ns: str) -> None:
    """A watch from a compacted resourceVersion: HTTP 200, then one ERROR event carrying a
    410 Expired Status, then the end of the stream
    (https://kubernetes.io/docs/reference/using-api/api-concepts/#410-gone-responses)."""
    api.make_namespace(api, ns)
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
    api.call("POST", leases, {"metadata": {"name": "l1"}, "spec": {"holderIdentity": "a"}})
    rv = api.call("GET", leases)[1]["metadata"]["resourceVersion"]
    api.call("PATCH", f"{leases}/l1", {"spec": {"holderIdentity": "b"}}, content_type=MERGE)
    api.expire(api)
    api.see("watch from a compacted resourceVersion",
            events(api.watch(f"{leases}?watch=true&resourceVersion={rv}&timeoutSeconds=5")))


def watch_bookmarks(api: Api, ns: str) -> None:
    """allowWatchBookmarks with timeoutSeconds: a BOOKMARK before the timeout once the watch
    has seen a change, none on an idle watch; from "now" (no resourceVersion) the current
    objects as ADDED and then a BOOKMARK marking the end of them, as with sendInitialEvents
    (https://kubernetes.io/docs/reference/using-api/api-concepts/#watch-bookmarks,
    #streaming-lists)."""
    _seed(api, ns, 2)
    rv = api.call("GET", _cms(ns))[1]["metadata"]["resourceVersion"]
    idle = f"{_cms(ns)}?watch=true&allowWatchBookmarks=true&timeoutSeconds=4&resourceVersion={rv}"
    api.see("an idle watch: nothing", events(api.watch(idle)))

    def change() -> None:
        time.sleep(0.5)
        api.call("PATCH", f"{_cms(ns)}/cm-a", {"data": {"x": "1"}}, content_type=MERGE)

    api.see("a change, then a bookmark before the timeout", events(api.watch(idle, change)))
    now = f"{_cms(ns)}?watch=true&allowWatchBookmarks=true&timeoutSeconds=1"
    api.see("from now: the objects, then the initial-events-end bookmark", events(api.watch(now)))
    api.see("resourceVersion=0: the same", events(api.watch(f"{now}&resourceVersion=0")))
    streaming = f"{now}&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
    api.see("sendInitialEvents", events(api.watch(streaming)))
    api.see("sendInitialEvents without resourceVersionMatch",
            events(api.watch(f"{now}&sendInitialEvents=true")))
    plain = f"{_cms(ns)}?watch=true&timeoutSeconds=1"
    api.see("no bookmarks asked: none", events(api.watch(plain)))


def watch_selector(api: Api, ns: str) -> None:
    """A watch with a label selector sees an object that leaves the selection DELETED and
    one that enters it ADDED (the watch cache's filtering)."""
    _seed(api, ns, 2)
    rv = api.call("GET", _cms(ns))[1]["metadata"]["resourceVersion"]

    def relabel() -> None:
        time.sleep(0.3)
        api.call("PATCH", f"{_cms(ns)}/cm-a", {"metadata": {"labels": {"tier": "odd"}}},
                 content_type=MERGE)
        api.call("PATCH", f"{_cms(ns)}/cm-b", {"metadata": {"labels": {"tier": "even"}}},
                 content_type=MERGE)
        api.call("DELETE", f"{_cms(ns)}/cm-b")

    path = f"{_cms(ns)}?watch=true&labelSelector=tier%3Deven&timeoutSeconds=2&resourceVersion={rv}"
    api.see("leave, enter, delete", events(api.watch(path, relabel)))


def watch_tables(api: Api, ns: str) -> None:
    """``kubectl get -w``: a watch asking for Tables gets one-row Tables, the column
    definitions in the first event only (apiserver ``endpoints/handlers/watch.go``)."""
    _seed(api, ns, 2)

    def change() -> None:
        time.sleep(0.3)
        api.call("PATCH", f"{_cms(ns)}/cm-a", {"data": {"x": "1"}}, content_type=MERGE)

    raw = api.watch_as(f"{_cms(ns)}?watch=true&timeoutSeconds=2", TABLE, change)
    api.see("table events", [(e["type"], e["object"]["kind"], "columnDefinitions" in e["object"],
                              bool(e["object"].get("columnDefinitions")),
                              [r["cells"][:-1] for r in e["object"]["rows"]]) for e in raw])


def jobs(api: Api, ns: str) -> None:
    """A Job keeps a ``generation`` (1, then +1 for a spec change, not for a status write),
    and its DELETE answers the Job, not a Status."""
    api.make_namespace(api, ns)
    path = f"/apis/batch/v1/namespaces/{ns}/jobs"
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}
    job = {"metadata": {"name": "j"}, "spec": {"suspend": True, "template": template}}
    api.see("created", api.call("POST", path, job)[1]["metadata"].get("generation"))
    status = {"status": {"conditions": [{"type": "Suspended", "status": "True"}]}}
    after = api.call("PATCH", f"{path}/j/status", status, content_type=MERGE)[1]
    api.see("a status write", (after["metadata"].get("generation"), _conditions(after)))
    after = api.call("PATCH", f"{path}/j", {"spec": {"parallelism": 2}}, content_type=MERGE)[1]
    api.see("a spec change", (after["metadata"].get("generation"), after["spec"]["parallelism"]))
    code, deleted = api.call("DELETE", f"{path}/j")
    api.see("delete", (code, deleted.get("kind"), deleted["metadata"].get("name")))


def _node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"pool": "gpu"}}, "spec": {},
            "status": {"conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady"},
                {"type": "MemoryPressure", "status": "False",
                 "reason": "KubeletHasSufficientMemory"},
            ]}}  # fmt: skip


def _conditions(answer: Any) -> Any:
    if not isinstance(answer, dict):
        return answer
    return [(c.get("type"), c.get("status"), c.get("reason"))
            for c in answer.get("status", {}).get("conditions", [])]  # fmt: skip


def patches(api: Api, ns: str) -> None:
    """Strategic merge (conditions merged by type), JSON merge (lists replaced, null
    deletes) and JSON patch (RFC 6902, a failed ``test`` refuses the patch) on a Node's
    status subresource and a ConfigMap
    (https://kubernetes.io/docs/tasks/manage-kubernetes-objects/update-api-object-kubectl-patch/)."""
    node = f"/api/v1/nodes/{ns}-node"
    api.call("POST", "/api/v1/nodes", _node(f"{ns}-node"))
    condition = {"type": "GpuHealthy", "status": "False", "reason": "Xid79"}
    smp = api.call("PATCH", f"{node}/status", {"status": {"conditions": [condition]}},
                   content_type=STRATEGIC)[1]
    api.see("strategic merge adds a condition", _conditions(smp))
    gone = {"status": {"conditions": [{"type": "MemoryPressure", "$patch": "delete"}]}}
    api.see("strategic merge deletes one", _conditions(
        api.call("PATCH", f"{node}/status", gone, content_type=STRATEGIC)[1]))
    merged = api.call("PATCH", f"{node}/status", {"status": {"conditions": [condition]}},
                      content_type=MERGE)[1]
    api.see("merge patch replaces the list", _conditions(merged))
    _json_patches(api, ns)


def _json_patches(api: Api, ns: str) -> None:
    api.make_namespace(api, ns)
    api.call("POST", _cms(ns), {"metadata": {"name": "j", "labels": {"a": "1"}},
                                "data": {"k": "v", "gone": "x"}})  # fmt: skip
    path = f"{_cms(ns)}/j"
    merge = {"metadata": {"labels": {"b": "2"}}, "data": {"gone": None}}
    api.see("merge patch: null deletes", _data(api.call("PATCH", path, merge, content_type=MERGE)))
    ops = [{"op": "add", "path": "/data/new", "value": "n"},
           {"op": "replace", "path": "/data/k", "value": "w"},
           {"op": "remove", "path": "/metadata/labels/a"},
           {"op": "copy", "from": "/data/k", "path": "/data/copied"},
           {"op": "move", "from": "/data/new", "path": "/data/moved"},
           {"op": "test", "path": "/metadata/labels/b", "value": "2"}]  # fmt: skip
    api.see("json patch", _data(api.call("PATCH", path, ops, content_type=JSON_PATCH)))
    failing = [{"op": "test", "path": "/data/k", "value": "not-it"}]
    api.ask("json patch: a failed test", "PATCH", path, failing, content_type=JSON_PATCH)
    missing = [{"op": "remove", "path": "/data/absent"}]
    api.ask("json patch: remove a missing field", "PATCH", path, missing, content_type=JSON_PATCH)
    api.ask("an unknown patch type", "PATCH", path, {}, content_type="application/foo")


def _data(answer: tuple[int, Any]) -> Any:
    code, body = answer
    if code != 200:
        return code, body
    return code, body.get("data"), body.get("metadata", {}).get("labels")


def status_subresource(api: Api, ns: str) -> None:
    """A write to the object leaves its status alone and one to ``/status`` its spec; a
    status write does not bump ``generation``
    (https://kubernetes.io/docs/concepts/extend-kubernetes/api-extension/custom-resources/#status-subresource
    and the built-in kinds' strategies, e.g. ``nodeStatusStrategy.PrepareForUpdate``)."""
    node = f"/api/v1/nodes/{ns}-node"
    created = api.call("POST", "/api/v1/nodes", _node(f"{ns}-node"))[1]
    api.see("a node created through the API", created["spec"])
    both = {"spec": {"unschedulable": True},
            "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "X"}]}}
    after = api.call("PATCH", node, both, content_type=STRATEGIC)[1]
    api.see("patch on the object: spec only", _node_view(after))
    after = api.call("PATCH", f"{node}/status", {"spec": {"unschedulable": False}, **both}
                     | {"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}},
                     content_type=STRATEGIC)[1]  # fmt: skip
    api.see("patch on status: status only", (*_node_view(after), _managed(after)))
    current = api.call("GET", node)[1]
    current["spec"] = {}
    current["status"]["conditions"] = []
    after = api.call("PUT", f"{node}/status", current)[1]
    api.see("put on status", _node_view(after))


def _node_view(node: Any) -> tuple[Any, ...]:
    """Whether it is cordoned, its conditions and its generation (Nodes have none)."""
    return node["spec"].get("unschedulable"), _conditions(node), node["metadata"].get("generation")


def managed_fields(api: Api, ns: str) -> None:
    """``managedFields`` of Update operations: the user agent's or ``fieldManager``'s, the
    fields each set (``.`` for a map it created), ownership moving to the last writer
    (https://kubernetes.io/docs/reference/using-api/server-side-apply/#field-management)."""
    api.make_namespace(api, ns)
    api.call("POST", _cms(ns), {"metadata": {"name": "m", "labels": {"a": "1"},
                                             "annotations": {"x": "1"}}, "data": {"k": "v"}})
    api.see("created", _managed(api.call("GET", f"{_cms(ns)}/m")[1]))
    api.call("PATCH", f"{_cms(ns)}/m?fieldManager=other", {"metadata": {"labels": {"a": "2"}},
             "data": {"k2": "v2"}}, content_type=MERGE)  # fmt: skip
    api.see("another manager takes a label", _managed(api.call("GET", f"{_cms(ns)}/m")[1]))
    api.call("PATCH", f"{_cms(ns)}/m?fieldManager=other", {"metadata": {"annotations": None}},
             content_type=MERGE)
    api.see("a map removed", _managed(api.call("GET", f"{_cms(ns)}/m")[1]))
    _managed_lists(api, ns)


def _managed_lists(api: Api, ns: str) -> None:
    """Items of a set (finalizers) and of a keyed list (Node conditions) are owned one by
    one; an object created owning nothing is not tracked by later updates."""
    set_list = {"metadata": {"name": "f", "finalizers": ["a.example.com/x"]}}
    api.see("a set's items", _managed(api.call("POST", _cms(ns), set_list)[1]))
    api.call("PATCH", f"{_cms(ns)}/f", {"metadata": {"finalizers": None}}, content_type=MERGE)
    node = f"/api/v1/nodes/{ns}-node"
    api.call("POST", "/api/v1/nodes", _node(f"{ns}-node"))
    added = {"type": "GpuHealthy", "status": "False", "reason": "Xid79", "message": "m",
             "lastHeartbeatTime": "2026-01-01T00:00:00Z",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
    patched = api.call("PATCH", f"{node}/status?fieldManager=agent",
                       {"status": {"conditions": [added]}}, content_type=STRATEGIC)[1]
    api.see("a keyed list's new item", _managed(patched))
    api.call("POST", _cms(ns), {"metadata": {"name": "bare"}})
    bare = api.call("PATCH", f"{_cms(ns)}/bare", {"data": {"a": "1"}}, content_type=MERGE)[1]
    api.see("created owning nothing, then written", _managed(bare))


def _managed(obj: Any) -> Any:
    entries = obj["metadata"].get("managedFields", [])
    return sorted(([e["manager"], e["operation"], e["apiVersion"], e.get("subresource"),
                    e.get("fieldsV1")] for e in entries), key=repr)  # fmt: skip


def server_side_apply(api: Api, ns: str) -> None:
    """Server-side apply: the applier owns what it applied (operation Apply), a second
    applier setting the same field conflicts (409) unless it forces, a field dropped from
    the applied configuration is removed
    (https://kubernetes.io/docs/reference/using-api/server-side-apply/)."""
    api.make_namespace(api, ns)
    path = f"{_cms(ns)}/applied"
    config = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": "applied", "labels": {"a": "1"}}, "data": {"k": "v", "j": "w"}}
    api.see("apply creates", _applied(api.call("PATCH", f"{path}?fieldManager=one", config,
                                               content_type=APPLY)))  # fmt: skip
    other = {**config, "metadata": {"name": "applied"}, "data": {"k": "other"}}
    api.ask("a second applier conflicts", "PATCH", f"{path}?fieldManager=two", other,
            content_type=APPLY)
    api.see("forced", _applied(api.call("PATCH", f"{path}?fieldManager=two&force=true", other,
                                        content_type=APPLY)))  # fmt: skip
    fewer = {**config, "data": {"j": "w"}}
    api.see("a dropped field is removed", _applied(api.call(
        "PATCH", f"{path}?fieldManager=one", fewer, content_type=APPLY)))
    api.call("PATCH", f"{path}?fieldManager=editor", {"data": {"j": "edited"}},
             content_type=MERGE)
    api.ask("an update's field conflicts too", "PATCH", f"{path}?fieldManager=one", fewer,
            content_type=APPLY)
    both = {**config, "data": {"j": "3", "k": "3"}, "metadata": {"name": "applied"}}
    api.ask("two owners conflict", "PATCH", f"{path}?fieldManager=three", both,
            content_type=APPLY)
    listed = {**config, "metadata": {"name": "listed", "finalizers": ["a.example.com/x"]}}
    api.see("a list applied", _applied(api.call(
        "PATCH", f"{_cms(ns)}/listed?fieldManager=one", listed, content_type=APPLY)))
    api.call("PATCH", f"{_cms(ns)}/listed", {"metadata": {"finalizers": None}},
             content_type=MERGE)
    api.see("yaml, forced", _applied(api.call(
        "PATCH", f"{path}?fieldManager=three&force=true",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: applied}\ndata: {j: '3', k: '3'}\n",
        content_type=APPLY)))


def _applied(answer: tuple[int, Any]) -> Any:
    code, body = answer
    if code not in (200, 201):
        return code, body
    return code, body.get("data"), body["metadata"].get("labels"), _managed(body)


def tables(api: Api, ns: str) -> None:
    """``Accept: ...;as=Table``: the columns and cells ``kubectl get`` prints, for a list,
    one object and a page (https://kubernetes.io/docs/reference/using-api/api-concepts/#receiving-resources-as-tables)."""
    _seed(api, ns, 3)
    api.call("POST", "/api/v1/nodes", _node(f"{ns}-node"))
    api.call("PATCH", f"/api/v1/nodes/{ns}-node", {"spec": {"unschedulable": True}},
             content_type=MERGE)
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
    api.call("POST", leases, {"metadata": {"name": "l"}, "spec": {"holderIdentity": "me"}})
    for step, path in (("configmaps", _cms(ns)), ("a page", f"{_cms(ns)}?limit=2"),
                       ("one configmap", f"{_cms(ns)}/cm-a"),
                       ("a node", f"/api/v1/nodes/{ns}-node"), ("leases", leases)):
        api.see(f"table of {step}", _table(api.call("GET", path, accept=TABLE)))


def _table(answer: tuple[int, Any]) -> Any:
    code, body = answer
    if code != 200:
        return code, body
    columns = [(c["name"], c["type"], c["format"], c["priority"])
               for c in body["columnDefinitions"]]  # fmt: skip
    ages = [i for i, c in enumerate(columns) if c[0] == "Age"]  # the clock's, not the server's
    rows = [([("<age>" if i in ages else cell) for i, cell in enumerate(row["cells"])],
             row["object"]["kind"], sorted(row["object"]["metadata"])) for row in body["rows"]]
    return code, body["kind"], body["apiVersion"], body["metadata"], columns, rows


def errors(api: Api, ns: str) -> None:
    """The ``Status`` bodies of refused requests: 404, 409 AlreadyExists and Conflict, 422
    Invalid, 400 BadRequest (https://kubernetes.io/docs/reference/using-api/api-concepts/
    and ``apimachinery/pkg/api/errors``)."""
    _seed(api, ns, 1)
    cm = f"{_cms(ns)}/cm-a"
    api.ask("get a missing object", "GET", f"{_cms(ns)}/nope")
    api.ask("delete a missing object", "DELETE", f"{_cms(ns)}/nope")
    api.ask("patch a missing object", "PATCH", f"{_cms(ns)}/nope", {}, content_type=MERGE)
    api.ask("create an existing one", "POST", _cms(ns), _configmap("cm-a"))
    stale = api.call("GET", cm)[1]
    api.call("PATCH", cm, {"data": {"k": "v"}}, content_type=MERGE)
    api.ask("replace with a stale resourceVersion", "PUT", cm, stale)
    api.ask("an invalid name", "POST", _cms(ns), _configmap("Not_Valid"))
    api.ask("namespace of the body differs", "POST", _cms(ns),
            {"metadata": {"name": "x", "namespace": "elsewhere"}})
    api.ask("name of the body differs", "PUT", cm, _configmap("cm-z"))
    api.ask("an unknown resource", "GET", f"/api/v1/namespaces/{ns}/nothings")
    api.ask("delete answers the object", "DELETE", cm)


SEQUENCES: tuple[Sequence, ...] = (
    paged_list, paged_list_selected, list_errors, expired_continue, watch_expired,
    watch_bookmarks, watch_selector, patches, status_subresource, managed_fields,
    server_side_apply, tables, errors, watch_tables, jobs,
)  # fmt: skip
