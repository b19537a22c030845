"""Store snapshots and list pages: what a paged list reads, at which resourceVersion."""

from __future__ import annotations

import pytest

from gpuguard.sim import paging, store


def pod(s: store.ObjectStore, namespace: str, name: str) -> store.Obj:
    return s.create("Pod", namespace, {"metadata": {"name": name}, "spec": {}})


def test_a_past_snapshot_is_rebuilt_from_the_history() -> None:
    s = store.ObjectStore()
    pod(s, "b", "p1")
    pod(s, "a", "p2")
    at = s.resource_version
    s.merge_patch("Pod", "a", "p2", {"spec": {"nodeName": "n"}})
    s.delete("Pod", "b", "p1")
    pod(s, "a", "p0")

    past = s.snapshot("Pod", None, at)
    now = s.snapshot("Pod")

    assert past.keys == (("a", "p2"), ("b", "p1"))
    assert past.objects[0]["spec"] == {}
    assert past.objects[0]["metadata"]["resourceVersion"] == "2"
    assert now.keys == (("a", "p0"), ("a", "p2"))
    assert s.snapshot("Pod", "a", at).keys == (("a", "p2"),)


def test_a_snapshot_older_than_the_history_is_gone() -> None:
    s = store.ObjectStore(history=2)
    for name in ("p1", "p2", "p3"):
        pod(s, "a", name)

    with pytest.raises(store.StoreGone, match="too old resource version: 0"):
        s.snapshot("Pod", None, 0)


def test_only_the_last_snapshots_are_kept() -> None:
    s = store.ObjectStore()
    first = None
    for i in range(store.SNAPSHOTS_KEPT + 1):
        pod(s, "a", f"p{i}")
        taken = s.snapshot("Pod")
        first = first or taken

    assert s.snapshot("Pod", None, 1) is not first  # evicted, rebuilt
    assert s.snapshot("Pod", None, 1).keys == first.keys


def test_pages_cover_the_snapshot_once_each_with_a_token_for_the_next() -> None:
    s = store.ObjectStore()
    for namespace, name in (("a", "x"), ("a", "y"), ("b", "x"), ("c", "z")):
        pod(s, namespace, name)
    snapshot = s.snapshot("Pod")
    seen: list[str] = []
    start = None
    while True:
        page = paging.page(snapshot, start, 3, None, across_namespaces=True)
        seen += [f'{o["metadata"]["namespace"]}/{o["metadata"]["name"]}' for o in page.objects]
        if not page.continue_token:
            break
        assert page.remaining == 1
        token = paging.decode(page.continue_token, None, across_namespaces=True)
        assert token.resource_version == snapshot.resource_version
        start = token.start

    assert seen == ["a/x", "a/y", "b/x", "c/z"]


def test_a_token_continues_after_the_last_key_as_the_api_server_encodes_it() -> None:
    token = paging.encode(("team", "p1\x00"), 42, across_namespaces=True)

    decoded = paging.decode(token, None, across_namespaces=True)

    assert (decoded.resource_version, decoded.start) == (42, ("team", "p1\x00"))
    assert paging.decode(paging.encode(("", "n1\x00"), 7, across_namespaces=False), "",
                         across_namespaces=False).start == ("", "n1\x00")
