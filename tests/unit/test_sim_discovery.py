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


def test_a_withheld_version_is_not_discovered() -> None:
    """A 1.36 cluster: DeviceTaintRules in resource.k8s.io/v1beta2 only."""
    withheld = frozenset({"resource.k8s.io/v1/devicetaintrules"})
    v1 = discovery.answer("/apis/resource.k8s.io/v1", "h", withheld)
    beta = discovery.answer("/apis/resource.k8s.io/v1beta2", "h", withheld)
    assert v1 is not None
    assert beta is not None
    assert "devicetaintrules" not in {r["name"] for r in v1["resources"]}
    assert {r["name"] for r in beta["resources"]} == {"devicetaintrules",
                                                     "devicetaintrules/status"}
    with_both = discovery.answer("/apis/resource.k8s.io/v1", "h")
    assert with_both is not None
    assert "devicetaintrules" in {r["name"] for r in with_both["resources"]}
