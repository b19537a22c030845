"""Server-side printing: the ``Table`` the API answers when a client asks for one.

``kubectl get`` sends ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io, ...`` and prints
the rows the server computed (https://kubernetes.io/docs/reference/using-api/api-concepts/
#receiving-resources-as-tables). The columns follow the real API server's printers
(kubernetes ``pkg/printers/internalversion/printers.go``) for what an operator looks at here:
a node's STATUS carries ``SchedulingDisabled`` when it is cordoned, as ``kubectl get nodes``
shows on a real cluster. The ``-o wide`` columns come too, at priority 1 (kubectl hides them
unless asked). AGE is measured against the wall clock and written as the server writes it
(``apimachinery`` ``duration.HumanDuration``: 45s, 2m5s, 12m, 5h3m, 3d). Held to a real API
server by ``tests/realcluster/test_api_differential.py``; the column descriptions are the Go
fields' documentation there and the column's name here.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gpuguard.sim import apiresources, store

Row = list[Any]
_TABLE_MEDIA = "as=Table"


def wanted(accept: str) -> bool:
    """True when the client asked for a Table (and would take one)."""
    return _TABLE_MEDIA in accept


def table(resource: apiresources.ResourceType, body: store.Obj) -> store.Obj:
    """A list or a single object (as the server answers it) as a ``meta.k8s.io/v1`` Table."""
    items = body.get("items", [body])
    columns, cells = _PRINTERS.get(resource.kind, _DEFAULT)
    now = datetime.now(UTC)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": _list_meta(body.get("metadata", {})),
        "columnDefinitions": [
            {"name": name, "type": "string", "format": "name" if name == "Name" else "",
             "description": name, "priority": 1 if name in _WIDE else 0}
            for name in columns
        ],
        "rows": [
            {"cells": cells(obj, now), "object": {
                "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata", {}),
            }}
            for obj in items
        ],
    }


def _list_meta(metadata: store.Obj) -> store.Obj:
    """The list's resourceVersion and, for a page, its continue token and remaining count
    (``kubectl get`` pages with ``limit=500`` and follows ``continue``)."""
    kept = {"resourceVersion": metadata.get("resourceVersion", "")}
    kept.update({k: metadata[k] for k in ("continue", "remainingItemCount") if k in metadata})
    return kept


def age(obj: store.Obj, now: datetime) -> str:
    """The object's age as the server prints it (``human_duration``)."""
    stamp = obj.get("metadata", {}).get("creationTimestamp")
    if not stamp:
        return "<unknown>"
    return human_duration(max(0, int((now - datetime.fromisoformat(stamp)).total_seconds())))


def human_duration(seconds: int) -> str:
    """``duration.HumanDuration``: seconds under 2 minutes, then minutes (with seconds under
    10 minutes), hours (with minutes under 8 hours), days (with hours under 8 days), years."""
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    if days < 365 * 8:
        years = days // 365
        return f"{years}y{days % 365}d" if days % 365 else f"{years}y"
    return f"{days // 365}y"


def _name(obj: store.Obj) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


def _node(obj: store.Obj, now: datetime) -> Row:
    conditions = obj.get("status", {}).get("conditions", [])
    ready = next((c.get("status") for c in conditions if c.get("type") == "Ready"), None)
    status = {"True": "Ready", "False": "NotReady"}.get(str(ready), "Unknown")
    if obj.get("spec", {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    labels = obj.get("metadata", {}).get("labels", {})
    roles = ",".join(sorted(k.split("/", 1)[1] for k in labels
                            if k.startswith("node-role.kubernetes.io/"))) or "<none>"
    info = obj.get("status", {}).get("nodeInfo", {})
    addresses = obj.get("status", {}).get("addresses", [])
    ips = [next((a.get("address") for a in addresses if a.get("type") == kind), None) or "<none>"
           for kind in ("InternalIP", "ExternalIP")]  # fmt: skip
    wide = [info.get(k) or "<unknown>"
            for k in ("osImage", "kernelVersion", "containerRuntimeVersion")]  # fmt: skip
    return [_name(obj), status, roles, age(obj, now), info.get("kubeletVersion", ""), *ips, *wide]


def _pod(obj: store.Obj, now: datetime) -> Row:
    status = obj.get("status", {})
    containers = status.get("containerStatuses", [])
    ready = sum(1 for c in containers if c.get("ready"))
    restarts = sum(int(c.get("restartCount", 0)) for c in containers)
    total = len(obj.get("spec", {}).get("containers", [])) or len(containers)
    gates = obj.get("spec", {}).get("readinessGates", [])
    true = {c.get("type") for c in status.get("conditions", []) if c.get("status") == "True"}
    wide = [status.get("podIP") or "<none>", obj.get("spec", {}).get("nodeName") or "<none>",
            status.get("nominatedNodeName") or "<none>",
            f"{sum(g.get('conditionType') in true for g in gates)}/{len(gates)}" if gates
            else "<none>"]  # fmt: skip
    return [_name(obj), f"{ready}/{total}", status.get("phase", ""), str(restarts),
            age(obj, now), *wide]


def _event(obj: store.Obj, now: datetime) -> Row:
    involved = obj.get("involvedObject", {})
    kind = str(involved.get("kind", "")).lower()
    return [_name(obj), obj.get("type", ""), obj.get("reason", ""),
            f"{kind}/{involved.get('name', '')}", obj.get("message", ""), age(obj, now)]


def _job(obj: store.Obj, now: datetime) -> Row:
    status = obj.get("status", {})
    done = next((c.get("type") for c in status.get("conditions", [])
                 if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"),
                "Running")
    completions = obj.get("spec", {}).get("completions", 1)
    return [_name(obj), done, f"{status.get('succeeded', 0)}/{completions}", age(obj, now)]


def _lease(obj: store.Obj, now: datetime) -> Row:
    return [_name(obj), obj.get("spec", {}).get("holderIdentity", ""), age(obj, now)]


def _configmap(obj: store.Obj, now: datetime) -> Row:
    count = len(obj.get("data") or {}) + len(obj.get("binaryData") or {})
    return [_name(obj), count, age(obj, now)]


def _other(obj: store.Obj, now: datetime) -> Row:
    return [_name(obj), age(obj, now)]


Printer = tuple[tuple[str, ...], Callable[[store.Obj, datetime], Row]]
_WIDE = frozenset({"Internal-IP", "External-IP", "OS-Image", "Kernel-Version",
                   "Container-Runtime", "IP", "Node", "Nominated Node", "Readiness Gates"})
_DEFAULT: Printer = (("Name", "Age"), _other)
_PRINTERS: dict[str, Printer] = {
    "Node": (("Name", "Status", "Roles", "Age", "Version", "Internal-IP", "External-IP",
              "OS-Image", "Kernel-Version", "Container-Runtime"), _node),
    "Pod": (("Name", "Ready", "Status", "Restarts", "Age", "IP", "Node", "Nominated Node",
             "Readiness Gates"), _pod),
    "ConfigMap": (("Name", "Data", "Age"), _configmap),
    "Event": (("Name", "Type", "Reason", "Object", "Message", "Age"), _event),
    "Job": (("Name", "Status", "Completions", "Age"), _job),
    "Lease": (("Name", "Holder", "Age"), _lease),
}
