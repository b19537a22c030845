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
    assert [(c["name"], c["priority"]) for c in answer["columnDefinitions"]] == [
        ("Name", 0), ("Status", 0), ("Roles", 0), ("Age", 0), ("Version", 0),
        ("Internal-IP", 1), ("External-IP", 1), ("OS-Image", 1), ("Kernel-Version", 1),
        ("Container-Runtime", 1)]  # -o wide's columns at priority 1, as kubectl hides them
    rows = [(r["cells"][0], r["cells"][1], r["cells"][2], r["cells"][4]) for r in answer["rows"]]
    assert rows == [("a", "Ready,SchedulingDisabled", "worker", "v1.34.3+rke2r1"),
                    ("b", "NotReady", "worker", "v1.34.3+rke2r1")]
    assert answer["rows"][0]["object"]["metadata"]["name"] == "a"


def test_ages_are_written_as_the_api_server_writes_them() -> None:
    """``duration.HumanDuration``: what ``kubectl get``'s AGE column shows."""
    ages = [tables.human_duration(s) for s in (
        0, 119, 120, 125, 600, 10_799, 10_800, 11_100, 28_800, 172_799, 172_800, 176_400,
        691_200, 63_072_000, 63_158_400, 252_288_000)]  # fmt: skip
    assert ages == ["0s", "119s", "2m", "2m5s", "10m", "179m", "3h", "3h5m", "8h", "47h",
                    "2d", "2d1h", "8d", "2y", "2y1d", "8y"]


def test_only_a_client_that_asks_gets_a_table() -> None:
    assert tables.wanted("application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
    assert not tables.wanted("application/json")
