"""The simulator's Kubernetes API (``sim.kubeapi``) held to a real kube-apiserver.

Every sequence of ``tests.realcluster.sequences`` (paged lists and 410s, watches with
bookmarks, the patch types, server-side apply and managedFields, status subresources,
Tables, error bodies) is sent to both; their transcripts, normalised
(``tests.realcluster.differential``), must be equal step by step — except the steps named in
``KNOWN``, each with the reason the simulator does not model it, which must still differ (a
fixed one is then removed from the table and from docs/design.md).

The real server is a plane of its own: no controllers (nothing writes but the test), etcd
compacted every 2 s (so a continue token or a watch expires within seconds), and the
Lease watch cache off (``--watch-cache-sizes``): a cached watch is served from the cache's
window, which a new cluster never rolls over, so the 410 of a watch is asked of etcd.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpuguard.sim import kubeapi, store
from gpuguard.sim.control_plane import cluster
from tests.realcluster import sequences
from tests.realcluster.differential import USER_AGENT, Api, wait_for

pytestmark = pytest.mark.integration

SIM_HISTORY = 500  # changes the simulator keeps; ``_churn`` writes more to expire them
COMPACTED_FLAGS = (
    "--etcd-compaction-interval=2s",
    "--watch-cache-sizes=leases.coordination.k8s.io#0",
)
KNOWN: dict[tuple[str, str], str] = {
    ("watch_expired", "watch from a compacted resourceVersion"):
        "same ERROR event and 410 Expired; etcd's message here (the Lease watch cache is off to"
        " provoke it), the watch cache's 'too old resource version: N (M)' in the simulator,"
        " which is what a real server with its default cache answers",
    ("status_subresource", "a node created through the API"):
        "the TaintNodesByCondition admission plugin (node.kubernetes.io/not-ready on a Node"
        " created through the API) is not modelled: the world registers Nodes as kubelets do",
    ("server_side_apply", "a list applied"):
        "server-side apply owns and merges a list whole in the simulator, a set's or keyed"
        " list's items one by one on a real server (v:\"...\", k:{...}); gpuguard applies"
        " nothing, and its Update writes own list items as the real server does",
    ("managed_fields", "created owning nothing, then written"):
        "a real server does not track Update writes to an object that has no managedFields;"
        " the simulator does: its world creates objects without managedFields (as kubelets and"
        " controllers would create them with theirs), and gpuguard's writes to them must be"
        " tracked",
}
"""(sequence, step) -> why the simulator answers it otherwise (docs/design.md, "The simulator
held to a real API server"). Each must still differ: a fixed one leaves the table."""


@pytest.fixture(scope="module")
def plane(
    bin_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[cluster.ControlPlane]:
    """A real API server and etcd only, compacting every 2 s; stopped after the module."""
    folder = tmp_path_factory.mktemp("differential-plane")
    with cluster.start(folder, controllers=False, scheduler=False,
                       extra_apiserver_flags=COMPACTED_FLAGS) as started:  # fmt: skip
        yield started


@pytest.fixture
def real(plane: cluster.ControlPlane) -> Iterator[Api]:
    context = ssl.create_default_context(cafile=str(plane.ca_cert))
    headers = {"Authorization": f"Bearer {plane.admin_token}", "User-Agent": USER_AGENT}
    with httpx.Client(base_url=plane.server, verify=context, headers=headers,
                      timeout=30) as client:  # fmt: skip
        yield Api("real", client, _compact, _namespace)


@pytest.fixture
def sim() -> Iterator[Api]:
    objects = store.ObjectStore(history=SIM_HISTORY)
    with kubeapi.serve(objects) as server, httpx.Client(
        base_url=server.url, headers={"User-Agent": USER_AGENT}, timeout=30
    ) as client:
        yield Api("sim", client, lambda api: _churn(objects))


def _churn(objects: store.ObjectStore) -> None:
    """More writes than the simulator keeps: every resourceVersion so far is compacted."""
    objects.create("ConfigMap", "churn", {"metadata": {"name": "churn"}, "data": {}})
    for i in range(SIM_HISTORY):
        objects.merge_patch("ConfigMap", "churn", "churn", {"data": {"i": str(i)}})


def _namespace(api: Api, name: str) -> None:
    code, answer = api.call("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    assert code in (201, 409), answer


def _compact(api: Api) -> None:
    """Write, then wait until etcd compacted the revision before that write."""
    code, written = api.call("POST", "/api/v1/namespaces/default/configmaps",
                             {"metadata": {"generateName": "compaction-"}})  # fmt: skip
    assert code == 201, written
    before = int(written["metadata"]["resourceVersion"]) - 1
    probe = (f"/api/v1/namespaces/default/configmaps?limit=1&resourceVersion={before}"
             "&resourceVersionMatch=Exact")  # fmt: skip
    wait_for("an etcd compaction", lambda: api.call("GET", probe)[0] == 410)


@pytest.mark.parametrize("sequence", sequences.SEQUENCES, ids=lambda s: s.__name__)
def test_the_simulator_answers_as_the_real_api_server(
    sequence: sequences.Sequence, sim: Api, real: Api
) -> None:
    namespace = f"diff-{sequence.__name__.replace('_', '-')}"
    sequence(sim, namespace)
    sequence(real, namespace)
    assert [s for s, _ in sim.transcript] == [s for s, _ in real.transcript]
    differing = {
        step: (ours, theirs)
        for (step, ours), (_, theirs) in zip(sim.transcript, real.transcript, strict=True)
        if ours != theirs
    }
    known = {step for (name, step) in KNOWN if name == sequence.__name__}
    unexplained = {step: d for step, d in differing.items() if step not in known}
    assert unexplained == {}, _report(unexplained)
    fixed = known - set(differing)
    assert not fixed, f"no longer differ (remove them from KNOWN and docs/design.md): {fixed}"


def _report(differing: dict[str, tuple[object, object]]) -> str:
    return "\n".join(f"{step}:\n  sim:  {ours!r}\n  real: {theirs!r}"
                     for step, (ours, theirs) in differing.items())  # fmt: skip
