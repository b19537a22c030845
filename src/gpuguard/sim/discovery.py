"""API discovery for the simulator's API server: what ``kubectl`` asks before anything else.

client-go's discovery client reads ``GET /api`` (APIVersions), ``GET /apis`` (APIGroupList)
and ``GET /api/v1`` / ``GET /apis/<group>/<version>`` (APIResourceList) to map
``kubectl get nodes`` to a URL. It first asks for the aggregated form
(``application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList``) and falls back to
these legacy documents when the answer's Content-Type is plain JSON
(https://kubernetes.io/docs/concepts/overview/kubernetes-api/#discovery-api). The documents
are built from the one resource table (``apiresources.RESOURCES``), so discovery names
exactly what the server serves.
"""

from __future__ import annotations

from gpuguard.sim import apiresources, store

_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
_SHORT_NAMES = {"nodes": ["no"], "pods": ["po"], "configmaps": ["cm"], "events": ["ev"]}


def answer(
    path: str, server_address: str, withheld: frozenset[str] = frozenset(),
) -> store.Obj | None:
    """The discovery document for ``path``, or None when ``path`` is not a discovery path;
    ``withheld`` resources (``ResourceType.served_as``) are not named."""
    parts = [p for p in path.split("/") if p]
    if parts == ["api"]:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
            ],
        }
    if parts == ["apis"]:
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": _groups(withheld)}
    if parts == ["api", "v1"]:
        return _resource_list("", "v1")
    if len(parts) == 2 and parts[0] == "apis":
        return next((g for g in _groups(withheld) if g["name"] == parts[1]), None)
    if len(parts) == 3 and parts[0] == "apis":
        return _resource_list(parts[1], parts[2], withheld)
    return None


def _served(withheld: frozenset[str]) -> list[apiresources.ResourceType]:
    return [r for r in apiresources.RESOURCES if r.served_as not in withheld]


def _groups(withheld: frozenset[str] = frozenset()) -> list[store.Obj]:
    names = sorted({r.group for r in _served(withheld) if r.group})
    groups = []
    for name in names:
        versions = sorted({r.version for r in _served(withheld) if r.group == name})
        entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
        groups.append({"kind": "APIGroup", "apiVersion": "v1", "name": name,
                       "versions": entries, "preferredVersion": entries[0]})
    return groups


def _resource_list(
    group: str, version: str, withheld: frozenset[str] = frozenset(),
) -> store.Obj | None:
    served = [r for r in _served(withheld) if (r.group, r.version) == (group, version)]
    if not served:
        return None
    resources: list[store.Obj] = []
    for r in served:
        resources.append({
            "name": r.plural, "singularName": r.kind.lower(), "namespaced": r.namespaced,
            "kind": r.kind, "verbs": _VERBS, "shortNames": _SHORT_NAMES.get(r.plural, []),
        })
        if r.has_status:
            resources.append({"name": f"{r.plural}/status", "singularName": "",
                              "namespaced": r.namespaced, "kind": r.kind,
                              "verbs": ["get", "patch", "update"]})
    group_version = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
            "resources": resources}
