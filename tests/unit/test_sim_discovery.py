"""The simulator's discovery documents name exactly the resources its API server serves, in
the shapes client-go's legacy discovery reads (APIVersions, APIGroupList, APIResourceList)."""

from __future__ import annotations

from gpuguard.sim import apiresources, discovery


def test_core_and_groups_lead_to_every_served_resource() -> None:
    versions = discovery.answer("/api", "127.0.0.1:1")
    assert versions is not None
    assert versions["kind"] == "APIVersions"
    assert versions["versions"] == ["v1"]
    groups = discovery.answer("/apis", "127.0.0.1:1")
    assert groups is not None
    found = set()
    paths = ["/api/v1"] + [f"/apis/{v['groupVersion']}" for g in groups["groups"]
                           for v in g["versions"]]
    for path in paths:
        listed = discovery.answer(path, "127.0.0.1:1")
        assert listed is not None
        assert listed["kind"] == "APIResourceList"
        found |= {(r["kind"], r["name"]) for r in listed["resources"] if "/" not in r["name"]}
    assert found == {(r.kind, r.plural) for r in apiresources.RESOURCES}


def test_a_collection_path_is_not_discovery() -> None:
    assert discovery.answer("/api/v1/nodes", "h") is None
    assert discovery.answer("/apis/batch/v1/namespaces/ns/jobs", "h") is None
    assert discovery.answer("/apis/no.such.group/v1", "h") is None
