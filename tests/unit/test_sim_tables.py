"""What ``kubectl get`` prints comes from the server's Table: a cordoned node's STATUS says
``SchedulingDisabled`` as on a real cluster."""

from __future__ import annotations

from gpuguard.sim import apiresources, tables

NODE = next(r for r in apiresources.RESOURCES if r.kind == "Node")


def node(name: str, *, ready: str, cordoned: bool) -> dict[str, object]:
    return {
        "metadata": {"name": name, "creationTimestamp": "2026-09-01T00:00:00+00:00",
                     "labels": {"node-role.kubernetes.io/worker": "true"}},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {"conditions": [{"type": "Ready", "status": ready}],
                   "nodeInfo": {"kubeletVersion": "v1.34.3+rke2r1"}},
    }


def test_node_rows_carry_status_roles_and_version() -> None:
    listed = {"metadata": {"resourceVersion": "7"},
              "items": [node("a", ready="True", cordoned=True),
                        node("b", ready="False", cordoned=False)]}
    answer = tables.table(NODE, listed)
    assert answer["kind"] == "Table"
    assert [c["name"] for c in answer["columnDefinitions"]] == [
        "Name", "Status", "Roles", "Age", "Version"]
    rows = [(r["cells"][0], r["cells"][1], r["cells"][2], r["cells"][4]) for r in answer["rows"]]
    assert rows == [("a", "Ready,SchedulingDisabled", "worker", "v1.34.3+rke2r1"),
                    ("b", "NotReady", "worker", "v1.34.3+rke2r1")]
    assert answer["rows"][0]["object"]["metadata"]["name"] == "a"


def test_only_a_client_that_asks_gets_a_table() -> None:
    assert tables.wanted("application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
    assert not tables.wanted("application/json")
