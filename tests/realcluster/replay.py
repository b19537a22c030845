"""Replay the admission cases the offline tests judged with cel-python (``tests.cel``'s
recorded corpus) as real requests to a real API server with gpuguard's chart installed.

Each case is sent as the user it names (impersonation: ``Impersonate-User``, the service
account's own groups, and ``Impersonate-Extra-*`` for a pod-bound token's claims) with
``dryRun=All``, so nothing is stored. The request's user also gets the group ``REPLAY_GROUP``,
bound to cluster-admin, so RBAC lets every request reach admission: what is judged is the
ValidatingAdmissionPolicies alone (no policy reads groups). An UPDATE or DELETE needs its old
object stored first: it is created as the admin (or, where the chart's policies refuse the
admin, as gpuguard's service account) and the new object is then PUT over it.

The server's answer names the policy that denied it ("ValidatingAdmissionPolicy 'NAME' with
binding 'NAME' denied request: ..."). A case agrees when cel-python's verdict for its policy
(refused or not) is the server's for that policy.
"""

from __future__ import annotations

import copy
import dataclasses
import glob
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuguard.model import remediation
from gpuguard.sim.control_plane import cluster
from tests import chart

Obj = dict[str, Any]
REPLAY_GROUP = "gpuguard.test:admission-replay"
PARAMS_SETTLE_S = 1.0
WARM_UP_S = 30.0
GPUGUARD = "system:serviceaccount:gpuguard:gpuguard"
_DENIED = re.compile(r"ValidatingAdmissionPolicy '([^']+)'")
# kind -> (plural, namespaced); the group and version are the object's apiVersion
RESOURCES = {
    "Node": ("nodes", False),
    "Pod": ("pods", True),
    "ConfigMap": ("configmaps", True),
    "Job": ("jobs", True),
    "DeviceTaintRule": ("devicetaintrules", False),
    "Lease": ("leases", True),
    "Secret": ("secrets", True),
    "ResourceClaim": ("resourceclaims", True),
    "ResourceClaimTemplate": ("resourceclaimtemplates", True),
}


@dataclass(frozen=True)
class Case:
    policy: str
    operation: str
    username: str
    obj: Obj | None
    old: Obj | None
    extra: dict[str, list[str]] | None
    params: Obj | None
    refused: bool  # cel-python: this policy refuses the request
    test: str
    default_install: bool = True  # judged with the policy the chart's default values render

    @property
    def kind(self) -> str:
        return str((self.obj or self.old or {})["kind"])


@dataclass(frozen=True)
class Outcome:
    case: Case
    status: int
    denied_by: frozenset[str]
    message: str
    setup_error: str = ""

    @property
    def verdict(self) -> str:
        """How the server answered: by the case's policy, or before any policy ran."""
        if self.setup_error:
            return "unreplayable"
        if self.case.policy in self.denied_by:
            return "refused by the policy"
        if self.status == 422 and "is invalid" in self.message:
            return "refused by the API's validation"
        if self.status == 403 and not self.denied_by:
            return "refused by built-in admission"
        return "admitted" if self.status < 300 else f"refused otherwise ({self.status})"

    @property
    def agrees(self) -> bool:
        """Refused offline and refused by the server (the policy, or the API's own checks
        before it), or admitted offline and not refused by that policy."""
        if self.setup_error:
            return False
        if self.case.refused:
            return self.verdict != "admitted"
        return self.case.policy not in self.denied_by


def load(folder: Path) -> list[Case]:
    """Every recorded case, once (the same request judged twice counts once)."""
    seen: dict[str, Case] = {}
    for path in sorted(glob.glob(str(folder / "*.jsonl"))):
        for line in Path(path).read_text().splitlines():
            raw = json.loads(line)
            key = json.dumps(
                {
                    **{k: raw[k] for k in ("policy", "object", "old", "username", "operation",
                                           "extra", "params")},
                    "default_install": raw.get("default_install", True),
                },
                sort_keys=True,
            )
            seen.setdefault(
                key,
                Case(
                    raw["policy"],
                    raw["operation"],
                    raw["username"],
                    raw["object"],
                    raw["old"],
                    raw["extra"],
                    raw["params"],
                    bool(raw["refused"]),
                    raw["test"],
                    raw.get("default_install", True),
                ),
            )
    return list(seen.values())


class Replayer:
    """Sends cases to one control plane (its chart installed)."""

    def __init__(self, plane: cluster.ControlPlane, *, add_claims: bool = True) -> None:
        self.plane = plane
        self.add_claims = add_claims  # a request as gpuguard without claims gets its pod's
        self._namespaces: set[str] = set()
        self._runtimes: set[str] = set()
        self._params_now: Obj | None = None
        self._accounts: set[tuple[str, str]] = set()
        plane.request(
            "POST",
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {
                "metadata": {"name": "gpuguard-test-admission-replay"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "cluster-admin",
                },
                "subjects": [
                    {"kind": "Group", "name": REPLAY_GROUP, "apiGroup": "rbac.authorization.k8s.io"}
                ],
            },
        )

    def warm_up(self, cases: list[Case]) -> None:
        """Wait until each policy refuses one case it must refuse: a policy and its binding
        take effect on the server a moment after they are stored."""
        firsts = {c.policy: c for c in reversed(cases) if c.refused}
        deadline = time.monotonic() + WARM_UP_S
        for case in firsts.values():
            while self.replay(case).verdict != "refused by the policy":
                if time.monotonic() > deadline:
                    return  # the replay then reports what disagrees
                time.sleep(0.2)

    def replay(self, case: Case) -> Outcome:
        """Send one case; an outcome whose setup_error says why it could not be sent."""
        if case.kind not in RESOURCES:  # a subresource's body (exec options, TokenRequest)
            return Outcome(case, 0, frozenset(), "", setup_error=f"{case.kind} not replayed")
        case = _namespaced(case)
        self._prepare(case)
        if case.operation == "CREATE":
            assert case.obj is not None
            if case.obj["metadata"].get("name"):
                self._delete(case.obj, None)
                self._delete(case.obj, GPUGUARD)
            status, body = self._send("POST", _collection(case.obj), case.obj, case)
            return _outcome(case, status, body)
        assert case.old is not None
        stored, error = self._store_old(case.old)
        if error:
            return Outcome(case, 0, frozenset(), "", setup_error=error)
        if case.operation == "DELETE":
            status, body = self._send("DELETE", _item(case.old), None, case)
            return _outcome(case, status, body)
        assert case.obj is not None
        if case.obj["metadata"].get("name") != case.old["metadata"]["name"]:
            return Outcome(case, 0, frozenset(), "", setup_error="the update renames the object")
        new = _as_client_writes(case.old, case.obj, stored)
        as_sent = {**case.obj, "metadata": new["metadata"]}  # the taints kept are no change
        path = _item(new) + ("/status" if _status_only(case.old, as_sent) else "")
        status, body = self._send("PUT", path, new, case)
        return _outcome(case, status, body)

    # -- setup -------------------------------------------------------------------------

    def _prepare(self, case: Case) -> None:
        for obj in (case.obj, case.old):
            if not obj:
                continue
            runtime = _pod_spec(obj).get("runtimeClassName")
            if runtime:
                self._runtime_class(runtime)
            namespace = obj.get("metadata", {}).get("namespace")
            if namespace:
                self._namespace(namespace)
                account = obj.get("spec", {}).get("serviceAccountName") or _template_account(obj)
                if account:
                    self._account(namespace, account)
        if case.params is not None:
            self._params(case.params)

    def _runtime_class(self, name: str) -> None:
        """The RuntimeClass a pod names (the NVIDIA runtime's ``nvidia``, as the GPU Operator
        installs it): without it the RuntimeClass admission plugin refuses the pod first."""
        if name not in self._runtimes:
            self.plane.request(
                "POST",
                "/apis/node.k8s.io/v1/runtimeclasses",
                {"metadata": {"name": name}, "handler": name},
            )
            self._runtimes.add(name)

    def _namespace(self, name: str) -> None:
        if name not in self._namespaces:
            self.plane.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
            self._namespaces.add(name)

    def _account(self, namespace: str, name: str) -> None:
        if (namespace, name) not in self._accounts:
            self.plane.request(
                "POST",
                f"/api/v1/namespaces/{namespace}/serviceaccounts",
                {"metadata": {"name": name}},
            )
            self._accounts.add((namespace, name))

    def _params(self, params: Obj) -> None:
        """The case's parameter object, as the ConfigMap the chart's binding names (the
        server reads it through an informer: a changed one is given a moment to arrive)."""
        if params == self._params_now:
            return
        self._params_now = params
        where = chart.defaults()["changes"]["jobTemplates"]
        meta = {"namespace": where["namespace"], "name": where["name"]}
        self._namespace(meta["namespace"])
        path = f"/api/v1/namespaces/{meta['namespace']}/configmaps/{meta['name']}"
        status, current = self.plane.request("GET", path)
        body = {**_creatable(params), "apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}
        if status == 200:
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            self.plane.request("PUT", path, body)
        else:
            self.plane.request("POST", f"/api/v1/namespaces/{meta['namespace']}/configmaps", body)
        time.sleep(PARAMS_SETTLE_S)

    def _store_old(self, old: Obj) -> tuple[Obj, str]:
        """Store ``old`` (afresh, or over what has its name where the policies forbid
        deleting it) as the admin or else gpuguard's controller (its pod-bound token's
        claims, which gpuguard-identity requires); a Node carrying gpuguard's marks is
        registered clean and then marked, as on a real cluster (gpuguard-node-integrity
        refuses a Node created with them). The stored object, or why it cannot be."""
        body = _creatable(old)
        errors = []
        for user in (None, GPUGUARD):
            self._delete(old, user)
            claims = _token(user, holder=_holder(old))
            status, stored = self._request("POST", _collection(old) + _managed(user), body, user,
                                           claims)  # fmt: skip
            if status == 409:
                status, current = self._request("GET", _item(old), None, None, {})
                body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                status, stored = self._request("PUT", _item(old) + _managed(user), body, user,
                                               claims)  # fmt: skip
                status = 201 if status == 200 else status
                del body["metadata"]["resourceVersion"]
            if status == 201:
                return stored, ""
            errors.append(f"{user or 'admin'}: {status} {_message(stored)}")
        if old["kind"] == "Node":
            return self._mark_node(old, errors)
        return {}, "; ".join(errors)

    def _mark_node(self, old: Obj, errors: list[str]) -> tuple[Obj, str]:
        """Register ``old`` without gpuguard's marks (or take the Node there: one under
        gpuguard's isolation cannot be deleted), set its marks as gpuguard, then its GPU
        conditions as the agent on that node, then the hand-off's condition as gpuguard (its
        one status write, with remediation.hand_off_pools set)."""
        status, stored = self._request("POST", _collection(old), _creatable(_clean_node(old)),
                                       None, {})
        if status == 409:
            status, stored = self._request("GET", _item(old), None, None, {})
        for user, sub in ((GPUGUARD, ""), (AGENT, "/status"), (GPUGUARD, "/status")):
            put = _overlaid(stored, old, status_by=sub and user) if status < 300 else stored
            if status >= 300 or put == stored:
                continue
            status, answer = self._request("PUT", _item(old) + sub + _managed(user), put, user,
                                           _token(user, old["metadata"]["name"]))
            if status >= 300:
                errors.append(f"{user}: {status} {_message(answer)}")
            else:
                stored = answer
        return (stored, "") if status < 300 else ({}, "; ".join(errors))

    def _delete(self, obj: Obj, user: str | None) -> None:
        self._request("DELETE", _item(obj) + "?gracePeriodSeconds=0", None, user, {})

    # -- requests ----------------------------------------------------------------------

    def _send(self, method: str, path: str, body: Obj | None, case: Case) -> tuple[int, Any]:
        """The case as its user; a request as gpuguard's controller without claims is sent
        with its pod-bound token's (the offline tests judge the other policies, which do not
        read them; gpuguard-identity refuses it without, tests/hostile says so)."""
        separator = "&" if "?" in path else "?"
        claims = self.add_claims and case.username == GPUGUARD
        extra = case.extra or (_token(GPUGUARD) if claims else {})
        return self._request(method, f"{path}{separator}dryRun=All", body, case.username, extra)

    def _request(
        self,
        method: str,
        path: str,
        body: Obj | None,
        user: str | None,
        extra: dict[str, list[str]],
    ) -> tuple[int, Any]:
        as_user = (user, *_account_groups(user), REPLAY_GROUP) if user else ()
        return self.plane.request(method, path, body, as_user=as_user, extra=extra)


AGENT = "system:serviceaccount:gpuguard:gpuguard-agent"
_GPU_CONDITIONS = ("GpuFallenOffBus", "GpuHardwareXid", "GpuDriverMismatch",
                   "GpuKernelLogUnreadable", "GpuRecoveryRequired", "GpuFabricFault")
HAND_OFF = remediation.HAND_OFF_CONDITION
_PEOPLES = ("gpuguard.io/hold", "gpuguard.io/reset-done", "gpuguard.io/inspected",
            "gpuguard.io/gate-report", "gpuguard.io/gpu-return", "gpuguard.io/change-applied")


def _managed(user: str | None) -> str:
    """gpuguard's setup writes under its field manager (``annotation_keys.FIELD_MANAGER``), as
    its own writes are recorded in ``managedFields``."""
    return "?fieldManager=gpuguard" if user == GPUGUARD else ""


def _holder(obj: Obj) -> str | None:
    """The pod a stored Lease names as holder: gpuguard-leader lets only that pod write it."""
    return (obj.get("spec") or {}).get("holderIdentity") if obj["kind"] == "Lease" else None


def _token(
    user: str | None, node: str = "cpu-node-a", holder: str | None = None
) -> dict[str, list[str]]:
    """The claims of gpuguard's pods' bound tokens (the controller's, or the agent's on
    ``node``) for a setup request as that account; none for anyone else. ``holder``: the
    controller pod a stored Lease names."""
    if user not in (GPUGUARD, AGENT):
        return {}
    pod = (holder or "gpuguard-5d8f7c9b4-replay") if user == GPUGUARD else "gpuguard-agent-replay"
    return {"authentication.kubernetes.io/pod-name": [pod],
            "authentication.kubernetes.io/pod-uid": ["00000000-0000-4000-8000-000000000001"],
            "authentication.kubernetes.io/node-name": [node if user == AGENT else "cpu-node-a"]}


def _unconditioned(node: Obj) -> Obj:
    """``node`` without gpuguard's GPU conditions (only the agent writes those) and the
    hand-off's (only gpuguard's account)."""
    body = copy.deepcopy(node)
    conditions = body.get("status", {}).get("conditions")
    if conditions is not None:
        body["status"]["conditions"] = [c for c in conditions
                                        if c.get("type") not in (*_GPU_CONDITIONS, HAND_OFF)]
    return body


def _overlaid(stored: Obj, old: Obj, *, status_by: str | None) -> Obj:
    """``stored`` (the server's fields kept) with ``old``'s labels, annotations and cordon,
    or (``status_by`` the agent or gpuguard) the status conditions that account writes: the
    agent all of ``old``'s but the hand-off's, gpuguard the hand-off's too."""
    put = copy.deepcopy(stored)
    meta = put["metadata"]
    if status_by:
        kept = [c for c in put.get("status", {}).get("conditions", [])
                if status_by == AGENT and c.get("type") == HAND_OFF]
        written = [c for c in old.get("status", {}).get("conditions", [])
                   if status_by == GPUGUARD or c.get("type") != HAND_OFF]
        put.setdefault("status", {})["conditions"] = copy.deepcopy(written) + kept
        return put
    for key in ("labels", "annotations"):
        if key in old["metadata"]:
            meta[key] = copy.deepcopy(old["metadata"][key])
    spec = put.setdefault("spec", {})  # the server's taints (TaintNodesByCondition) kept
    spec.pop("unschedulable", None)
    if "unschedulable" in (old.get("spec") or {}):
        spec["unschedulable"] = old["spec"]["unschedulable"]
    return put


def _clean_node(node: Obj) -> Obj:
    """``node`` as a kubelet registers it: no gpuguard marks, labels or GPU conditions."""
    body = _unconditioned(node)
    meta = body.setdefault("metadata", {})
    for key in ("annotations", "labels"):
        kept = {k: v for k, v in (meta.get(key) or {}).items()
                if not k.startswith("gpuguard.io/") or (key == "annotations" and k in _PEOPLES)}
        if key in meta:
            meta[key] = kept
    meta.pop("managedFields", None)
    return body


def _namespaced(case: Case) -> Case:
    """A namespaced object the offline test left without a namespace is in the chart's (the
    policies' bindings match gpuguard's namespace)."""

    def placed(obj: Obj | None) -> Obj | None:
        if obj is None or not RESOURCES[obj["kind"]][1] or obj["metadata"].get("namespace"):
            return obj
        return {**obj, "metadata": {**obj["metadata"], "namespace": chart.NAMESPACE}}

    return dataclasses.replace(case, obj=placed(case.obj), old=placed(case.old))


def _account_groups(user: str) -> tuple[str, ...]:
    """The groups the API server gives a service account's own token."""
    parts = user.split(":")
    if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"]:
        return (
            "system:serviceaccounts",
            f"system:serviceaccounts:{parts[2]}",
            "system:authenticated",
        )
    if user.startswith("system:node:"):
        return ("system:nodes", "system:authenticated")
    return ("system:authenticated",)


def _outcome(case: Case, status: int, body: Any) -> Outcome:
    message = _message(body)
    denied = frozenset(_DENIED.findall(message)) if status >= 400 else frozenset()
    return Outcome(case, status, denied, message)


def _message(body: Any) -> str:
    return str(body.get("message", "")) if isinstance(body, dict) else str(body)


def _collection(obj: Obj) -> str:
    plural, namespaced = RESOURCES[obj["kind"]]
    version = obj["apiVersion"]
    prefix = f"/api/{version}" if version == "v1" else f"/apis/{version}"
    if namespaced:
        return f"{prefix}/namespaces/{obj['metadata']['namespace']}/{plural}"
    return f"{prefix}/{plural}"


def _item(obj: Obj) -> str:
    return f"{_collection(obj)}/{obj['metadata']['name']}"


def _creatable(obj: Obj) -> Obj:
    body = copy.deepcopy(obj)
    meta = body.setdefault("metadata", {})
    for key in ("resourceVersion", "uid", "creationTimestamp", "generation"):
        meta.pop(key, None)
    return body


def _pod_spec(obj: Obj) -> Obj:
    spec: Obj = obj.get("spec") or {}
    return spec.get("template", {}).get("spec") or spec if obj["kind"] == "Job" else spec


def _template_account(obj: Obj) -> str | None:
    account = obj.get("spec", {}).get("template", {}).get("spec", {}).get("serviceAccountName")
    return str(account) if account else None


def _status_only(old: Obj, new: Obj) -> bool:
    """A change of status alone, or no change at all (a heartbeat), goes to the status
    subresource (as the kubelet and agent write it); anything else to the object."""
    rest = {k: v for k, v in new.items() if k not in ("status", "metadata")}
    old_rest = {k: v for k, v in old.items() if k not in ("status", "metadata")}
    return rest == old_rest and (new.get("status") != old.get("status") or new == old)


def _as_client_writes(old: Obj, obj: Obj, stored: Obj) -> Obj:
    """``obj`` as a client PUTs it over ``stored``: the stored version and uid; the taints the
    server added at registration (TaintNodesByCondition) kept when the case changes none; the
    stored ``managedFields`` kept when the case changes none, else those of the managers the
    case keeps (``[{}]`` resets them all, as the API documents)."""
    new = copy.deepcopy(obj)
    meta = new.setdefault("metadata", {})
    meta["resourceVersion"] = stored["metadata"]["resourceVersion"]
    meta["uid"] = stored["metadata"]["uid"]
    if obj["kind"] == "Node" and (old.get("spec") or {}).get("taints") == (
        (obj.get("spec") or {}).get("taints")
    ):
        taints = (stored.get("spec") or {}).get("taints")
        new.setdefault("spec", {}).pop("taints", None)
        if taints:
            new["spec"]["taints"] = copy.deepcopy(taints)
    if "managedFields" in meta or "managedFields" in old.get("metadata", {}):
        before = {_owner(e) for e in old["metadata"].get("managedFields", [])}
        kept = {_owner(e) for e in meta.get("managedFields", [])}
        meta.pop("managedFields", None)
        if kept != before:
            have = stored["metadata"].get("managedFields", [])
            entries = [e for e in have if _owner(e) in kept]
            ours = {_owner(e) for e in have}
            entries += [e for e in obj["metadata"].get("managedFields", [])
                        if _owner(e) not in ours]  # an entry the case adds: as written
            meta["managedFields"] = entries or [{}]
    return new


def _owner(entry: Obj) -> tuple[str, str, str]:
    """A managedFields entry's owner: its manager, operation and subresource."""
    return (entry.get("manager", ""), entry.get("operation", ""), entry.get("subresource", ""))
