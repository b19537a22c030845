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
import glob
import http.client
import json
import re
import ssl
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuguard.sim.control_plane import cluster

Obj = dict[str, Any]
REPLAY_GROUP = "gpuguard.test:admission-replay"
GPUGUARD = "system:serviceaccount:gpuguard:gpuguard"
_DENIED = re.compile(r"ValidatingAdmissionPolicy '([^']+)'")
# kind -> (API prefix, plural, namespaced)
RESOURCES = {
    "Node": ("/api/v1", "nodes", False),
    "Pod": ("/api/v1", "pods", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "Job": ("/apis/batch/v1", "jobs", True),
    "DeviceTaintRule": ("/apis/resource.k8s.io/v1", "devicetaintrules", False),
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
    def agrees(self) -> bool:
        return not self.setup_error and (self.case.policy in self.denied_by) == self.case.refused


def load(folder: Path) -> list[Case]:
    """Every recorded case, once (the same request judged twice counts once)."""
    seen: dict[str, Case] = {}
    for path in sorted(glob.glob(str(folder / "*.jsonl"))):
        for line in Path(path).read_text().splitlines():
            raw = json.loads(line)
            key = json.dumps(
                {
                    k: raw[k]
                    for k in ("policy", "object", "old", "username", "operation", "extra", "params")
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
                ),
            )
    return list(seen.values())


class Replayer:
    """Sends cases to one control plane (its chart installed)."""

    def __init__(self, plane: cluster.ControlPlane) -> None:
        self.plane = plane
        self._context = ssl.create_default_context(cafile=str(plane.ca_cert))
        self._namespaces: set[str] = set()
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

    def replay(self, case: Case) -> Outcome:
        self._prepare(case)
        if case.operation == "CREATE":
            assert case.obj is not None
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
        new = copy.deepcopy(case.obj)
        new.setdefault("metadata", {})["resourceVersion"] = stored["metadata"]["resourceVersion"]
        new["metadata"]["uid"] = stored["metadata"]["uid"]
        path = _item(new) + ("/status" if _status_only(case.old, new) else "")
        status, body = self._send("PUT", path, new, case)
        return _outcome(case, status, body)

    # -- setup -------------------------------------------------------------------------

    def _prepare(self, case: Case) -> None:
        for obj in (case.obj, case.old):
            if not obj:
                continue
            namespace = obj.get("metadata", {}).get("namespace")
            if namespace:
                self._namespace(namespace)
                account = obj.get("spec", {}).get("serviceAccountName") or _template_account(obj)
                if account:
                    self._account(namespace, account)
        if case.params is not None:
            self._params(case.params)

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
        meta = params["metadata"]
        self._namespace(meta["namespace"])
        path = f"/api/v1/namespaces/{meta['namespace']}/configmaps/{meta['name']}"
        status, current = self.plane.request("GET", path)
        body = {**_creatable(params), "apiVersion": "v1", "kind": "ConfigMap"}
        if status == 200:
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            self.plane.request("PUT", path, body)
        else:
            self.plane.request("POST", f"/api/v1/namespaces/{meta['namespace']}/configmaps", body)

    def _store_old(self, old: Obj) -> tuple[Obj, str]:
        """Store ``old`` afresh (deleting what has its name); the stored object, or an error."""
        body = _creatable(old)
        errors = []
        for user in (None, GPUGUARD):
            self._delete(old, user)
            status, stored = self._request("POST", _collection(old), body, user, {})
            if status == 201:
                return stored, ""
            errors.append(f"{user or 'admin'}: {status} {_message(stored)}")
        return {}, "; ".join(errors)

    def _delete(self, obj: Obj, user: str | None) -> None:
        self._request("DELETE", _item(obj) + "?gracePeriodSeconds=0", None, user, {})

    # -- requests ----------------------------------------------------------------------

    def _send(self, method: str, path: str, body: Obj | None, case: Case) -> tuple[int, Any]:
        separator = "&" if "?" in path else "?"
        return self._request(
            method, f"{path}{separator}dryRun=All", body, case.username, case.extra or {}
        )

    def _request(
        self,
        method: str,
        path: str,
        body: Obj | None,
        user: str | None,
        extra: dict[str, list[str]],
    ) -> tuple[int, Any]:
        # One header line per group and per extra value, as impersonation reads them (urllib
        # keeps one value per header name), so the request goes through http.client.
        headers = [
            ("Authorization", f"Bearer {self.plane.admin_token}"),
            ("Content-Type", "application/json"),
            ("Accept", "application/json"),
        ]
        if user:
            headers.append(("Impersonate-User", user))
            headers += [("Impersonate-Group", g) for g in (*_account_groups(user), REPLAY_GROUP)]
            headers += [
                ("Impersonate-Extra-" + urllib.parse.quote(key, safe=""), value)
                for key, values in extra.items()
                for value in values
            ]
        data = b"" if body is None else json.dumps(body).encode()
        url = urllib.parse.urlsplit(self.plane.server)
        connection = http.client.HTTPSConnection(
            url.hostname or "", url.port, context=self._context, timeout=30
        )
        try:
            connection.putrequest(method, path)
            for name, value in [*headers, ("Content-Length", str(len(data)))]:
                connection.putheader(name, value)
            connection.endheaders(data)
            answer = connection.getresponse()
            raw = answer.read()
        finally:
            connection.close()
        try:
            return answer.status, json.loads(raw or b"null")
        except ValueError:
            return answer.status, raw.decode(errors="replace")


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
    prefix, plural, namespaced = RESOURCES[obj["kind"]]
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


def _template_account(obj: Obj) -> str | None:
    account = obj.get("spec", {}).get("template", {}).get("spec", {}).get("serviceAccountName")
    return str(account) if account else None


def _status_only(old: Obj, new: Obj) -> bool:
    """A change of status alone goes to the status subresource (as the kubelet and agent
    write it); anything else to the object."""
    rest = {k: v for k, v in new.items() if k not in ("status", "metadata")}
    old_rest = {k: v for k, v in old.items() if k not in ("status", "metadata")}
    return new.get("status") != old.get("status") and rest == old_rest
