"""The hostile suite (tests/hostile), every case as the real request it describes, against the
real API server with the chart installed by Helm (default values; then upgraded to each set of
opt-in values the suite judges cases with): CONNECT (exec, attach, port-forward),
subresources (status, eviction, token, ephemeralcontainers), Secrets and Leases included, each
as its own user with exactly its own claims (none added).

A refused case agrees when the server refuses it by one of the policies named for it; an
admitted one when no policy refuses it. Every case that does not is sorted into a named cause
(``CAUSES``); none may be left unnamed, and no named cause may go unseen.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuguard.sim.control_plane import chart as plane_chart
from gpuguard.sim.control_plane import cluster
from tests.hostile import model
from tests.hostile.suite import CASES
from tests.realcluster import replay
from tests.realcluster.conftest import install_chart

CONNECT = {"exec": "?command=sh&stdin=true&stdout=true", "attach": "?stdin=true&stdout=true",
           "portforward": "?ports=8080"}  # fmt: skip
BODY_SUBRESOURCES = {"token": "serviceaccounts", "eviction": "pods"}  # kind's body, target's


@dataclasses.dataclass(frozen=True)
class Sent:
    case: model.Case
    status: int
    denied_by: frozenset[str]
    message: str
    setup_error: str = ""

    @property
    def verdict(self) -> str:
        if self.setup_error:
            return "unreplayable"
        if self.denied_by & set(self.case.refused_by):
            return "refused by its policy"
        if self.denied_by:
            return "refused by another policy"
        if self.status == 422 and "is invalid" in self.message:
            return "refused by the API's validation"
        if self.status == 403:
            return "refused by built-in admission"
        return "admitted" if self.status < 300 else f"refused otherwise ({self.status})"

    @property
    def agrees(self) -> bool:
        if self.case.refused_by:
            return self.verdict == "refused by its policy"
        return not self.denied_by and not self.setup_error

    @property
    def cause(self) -> str | None:
        """Why it does not agree: a cause of its verdict (``BEFORE_POLICIES``), or of the
        case (``CAUSES``); None when it agrees, "unnamed" when no cause is known."""
        if self.agrees:
            return None
        if self.case.refused_by and self.verdict in BEFORE_POLICIES:
            return self.verdict
        named = CAUSES if self.case.values is None else OPT_IN_CAUSES
        return next((key for key in named if key in self.case.id), "unnamed")


def send(replayer: replay.Replayer, case: model.Case) -> Sent:
    """The case as its request: a CONNECT or a subresource body to its target's path, else
    through ``replay.Replayer`` (objects, their status and ephemeralcontainers)."""
    obj = case.obj or case.old
    assert obj is not None
    namespace = obj.get("metadata", {}).get("namespace") or "gpuguard"
    if case.operation == "CONNECT":
        path = f"/api/v1/namespaces/{namespace}/pods/{case.target}/{case.subresource}"
        return _sent(case, *_as(replayer, case, "POST", path + CONNECT[case.subresource], None))
    if case.subresource in BODY_SUBRESOURCES:
        replayer._namespace(namespace)
        target = case.target or obj["metadata"]["name"]
        plural = BODY_SUBRESOURCES[case.subresource]
        if plural == "pods":  # the pod an eviction names exists (its PDB is read after)
            _pod(replayer, namespace, target)
        path = f"/api/v1/namespaces/{namespace}/{plural}/{target}/{case.subresource}"
        return _sent(case, *_as(replayer, case, "POST", path + "?dryRun=All", obj))
    if case.subresource == "ephemeralcontainers":
        return _ephemeral(replayer, case)
    policy = next(iter(case.refused_by), "")
    outcome = replayer.replay(replay.Case(policy, case.operation, case.username, case.obj,
                                          case.old, case.extra, None, bool(case.refused_by),
                                          f"tests/hostile/{case.id}"))  # fmt: skip
    return Sent(case, outcome.status, outcome.denied_by, outcome.message, outcome.setup_error)


def _as(
    replayer: replay.Replayer, case: model.Case, method: str, path: str, body: Any
) -> tuple[int, Any]:
    return replayer._request(method, path, body, case.username, case.extra or {})


def _sent(case: model.Case, status: int, body: Any) -> Sent:
    message = replay._message(body)
    denied = frozenset(replay._DENIED.findall(message)) if status >= 400 else frozenset()
    return Sent(case, status, denied, message)


def _pod(replayer: replay.Replayer, namespace: str, name: str) -> None:
    replayer._request("POST", f"/api/v1/namespaces/{namespace}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]}},
        None, {})  # fmt: skip


def _ephemeral(replayer: replay.Replayer, case: model.Case) -> Sent:
    """The pod stored as its old form, then its ephemeral containers PUT as the case's user."""
    assert case.old is not None
    assert case.obj is not None
    replayer._prepare(replay.Case("", "UPDATE", case.username, case.obj, case.old, None, None,
                                  True, ""))  # fmt: skip
    stored, error = replayer._store_old(case.old)
    if error:
        return Sent(case, 0, frozenset(), "", setup_error=error)
    new = copy.deepcopy(case.obj)
    new["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
    path = replay._item(new) + "/ephemeralcontainers?dryRun=All"
    return _sent(case, *_as(replayer, case, "PUT", path, new))


# Why the real server's answer differs from the offline one, and why that is not a hole.
_OPT_IN = (
    "judged offline with the chart's opt-in values (the case's `values`); this plane runs "
    "the default install; they are replayed by the next test, the release upgraded to them"
)
_BOUND = (
    "its stored form is a running agent pod, which carries the nodeName its binding gave it: "
    "gpuguard-agent-pod refuses a pod created with one (and gpuguard-creators one made by "
    "hand), and this plane has no DaemonSet controller or scheduler to make it"
)
CAUSES: dict[str, str] = {
    "agent-ephemeral-debug-container": _BOUND,  # refused offline by agent-pod-fields
}
OPT_IN_CAUSES: dict[str, str] = {
    "agent-pod-bound-": _BOUND,  # an update of the bound pod (a label change), admitted offline
}
BEFORE_POLICIES = {
    "refused by the API's validation": "the object is one the API server's own validation "
    "refuses before any admission policy runs (a subPath with '..', Bidirectional propagation "
    "or an unmasked /proc unprivileged, privileged with allowPrivilegeEscalation false, a "
    "mount path twice, a changed podCIDR): refused either way",
    "refused by built-in admission": "NodeRestriction refuses the kubelet's credential first "
    "(a kubelet may not change its Node's taints or its own labels of that kind): refused "
    "either way",
}


@pytest.fixture(scope="module")
def hostile_plane(
    bin_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[cluster.ControlPlane]:
    """An API server alone (no controller-manager) with the chart installed, default values."""
    with cluster.start(
        tmp_path_factory.mktemp("hostile"), controllers=False, scheduler=False
    ) as plane:
        install_chart(plane)
        yield plane


def test_the_real_api_server_answers_the_hostile_suite_as_offline(
    hostile_plane: cluster.ControlPlane,
) -> None:
    replayer = replay.Replayer(hostile_plane, add_claims=False)
    default = [c for c in CASES if c.values is None]
    replayer.warm_up([replay.Case(next(iter(c.refused_by)), c.operation, c.username, c.obj,
                                  c.old, c.extra, None, True, c.id)
                      for c in default if c.refused_by and not c.subresource])  # fmt: skip
    sent = [send(replayer, case) for case in default]
    by_class: collections.Counter[tuple[str, str, str]] = collections.Counter(
        (s.case.attacker, "refused" if s.case.refused_by else "admitted", s.verdict)
        for s in sent
    )
    print(f"\nhostile replay: {sum(s.agrees for s in sent)}/{len(sent)} agree on the default "
          f"install; {len(CASES) - len(default)} cases judged with opt-in values ({_OPT_IN})")
    for (attacker, offline, verdict), count in sorted(by_class.items()):
        print(f"  {attacker:26} {offline:9} {verdict}: {count}")
    kinds = collections.Counter(
        f"{s.case.operation} {s.case.subresource or (s.case.obj or s.case.old or {})['kind']}"
        for s in sent
        if s.case.operation == "CONNECT" or s.case.subresource
        or (s.case.obj or s.case.old or {})["kind"] in ("Secret", "Lease")
    )
    agreed = collections.Counter(
        f"{s.case.operation} {s.case.subresource or (s.case.obj or s.case.old or {})['kind']}"
        for s in sent
        if s.agrees and (s.case.operation == "CONNECT" or s.case.subresource
                         or (s.case.obj or s.case.old or {})["kind"] in ("Secret", "Lease"))
    )
    for s in sent:
        if not s.case.refused_by and s.verdict != "admitted" and s.agrees:
            print(f"  no policy refused, yet {s.status}: {s.case.id} {s.message[:160]}")
    for kind, count in sorted(kinds.items()):
        print(f"  {kind:28} {agreed[kind]}/{count} agree")
    causes = collections.Counter(s.cause for s in sent if s.cause is not None)
    for cause, count in sorted(causes.items()):
        print(f"  differs: {cause}: {count}")
    unnamed = [s for s in sent if s.cause == "unnamed"]
    assert not unnamed, "\n".join(
        f"{s.case.id}: {s.case.operation} {s.case.subresource} as {s.case.username}: offline "
        f"{sorted(s.case.refused_by) or 'admitted'}; server {s.verdict} {s.status} "
        f"{s.setup_error or s.message[:240]}"
        for s in unnamed
    )
    stale = [key for key in CAUSES if key not in causes]
    assert not stale, f"named causes no longer seen (remove them): {stale}"


SETTLE_S = 20.0  # a changed policy takes effect a moment after helm stores it


def test_the_cases_judged_with_opt_in_values_on_a_plane_upgraded_to_those_values(
    hostile_plane: cluster.ControlPlane, tmp_path: Path
) -> None:
    """The same, for the cases judged offline with opt-in chart values: the release upgraded
    to each case's values in turn (``helm upgrade``), then that group's cases sent. Runs after
    the default install's test (same plane)."""
    replayer = replay.Replayer(hostile_plane, add_claims=False)
    groups: dict[str, list[model.Case]] = collections.defaultdict(list)
    for case in CASES:
        if case.values is not None:
            groups[json.dumps(case.values, sort_keys=True)].append(case)
    sent: list[Sent] = []
    for index, (values, cases) in enumerate(sorted(groups.items())):
        path = tmp_path / f"values-{index}.json"
        path.write_text(values)
        _forget_accounts(replayer)
        plane_chart.helm(hostile_plane, "upgrade", plane_chart.RELEASE,
                         str(plane_chart.chart_dir()), f"--namespace={plane_chart.NAMESPACE}",
                         f"--values={path}")  # fmt: skip
        sent += _settled(replayer, cases)
    print(f"\nopt-in values: {sum(s.agrees for s in sent)}/{len(sent)} agree over "
          f"{len(groups)} values sets")
    for s in sent:
        print(f"  {s.case.id}: {s.verdict}")
    causes = collections.Counter(s.cause for s in sent if s.cause is not None)
    unnamed = [s for s in sent if s.cause == "unnamed"]
    assert not unnamed, "\n".join(
        f"{s.case.id}: offline {sorted(s.case.refused_by) or 'admitted'}; server {s.verdict} "
        f"{s.status} {s.setup_error or s.message[:240]}"
        for s in unnamed
    )
    stale = [key for key in OPT_IN_CAUSES if key not in causes]
    assert not stale, f"named causes no longer seen (remove them): {stale}"


def _forget_accounts(replayer: replay.Replayer) -> None:
    """Delete the service accounts earlier cases made in gpuguard's namespace (Helm will not
    take over an object it did not create); the chart's own and ``default`` stay."""
    where = f"/api/v1/namespaces/{plane_chart.NAMESPACE}/serviceaccounts"
    _, found = hostile_request(replayer, "GET", where)
    for account in found.get("items", []):
        meta = account["metadata"]
        if meta["name"] != "default" and (meta.get("labels") or {}).get(MANAGED_BY) != "Helm":
            hostile_request(replayer, "DELETE", f"{where}/{meta['name']}")
            replayer._accounts.discard((plane_chart.NAMESPACE, meta["name"]))


MANAGED_BY = "app.kubernetes.io/managed-by"


def hostile_request(replayer: replay.Replayer, method: str, path: str) -> tuple[int, Any]:
    """A request as the admin."""
    status, body = replayer.plane.request(method, path)
    return status, body if isinstance(body, dict) else {}


def _settled(replayer: replay.Replayer, cases: list[model.Case]) -> list[Sent]:
    """The cases sent once the upgraded policies answer them as offline, or as they answer at
    the deadline (a case that never agrees is reported, not retried for ever)."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        sent = [send(replayer, case) for case in cases]
        if all(s.cause in (None, *BEFORE_POLICIES) for s in sent) or time.monotonic() > deadline:
            return sent
        time.sleep(1.0)
