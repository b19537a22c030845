"""The ``pods/eviction`` subresource as the API server serves it: an eviction is a
PodDisruptionBudget-checked delete (https://kubernetes.io/docs/concepts/scheduling-eviction/
api-eviction/: "the API server ... checks the relevant PodDisruptionBudgets", answering
``429 Too Many Requests`` when the eviction is not allowed now, ``500`` when several budgets
select the pod).

Modelled on the eviction REST handler (kubernetes ``pkg/registry/core/pod/storage/
eviction.go``): a pod that is terminal, Pending or already deleting is deleted without a budget
check; otherwise the one budget selecting it must allow a disruption. The disruption
controller's ``status.disruptionsAllowed`` is computed here from the budget's spec and the
matching pods (healthy: Running with Ready=True): ``minAvailable`` or ``maxUnavailable``, an
integer or a percentage rounded up. Not modelled: ``unhealthyPodEvictionPolicy``, budgets over
a controller's scale, grace periods (the pod is removed at once).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gpuguard.sim import apiresources, selectors, store

_NO_BUDGET_CHECK = ("Succeeded", "Failed", "Pending")
VIOLATES = "Cannot evict pod as it would violate the pod's disruption budget."


def evict(object_store: store.ObjectStore, namespace: str, name: str) -> store.Obj:
    """Delete the pod if its budget allows it; the ``Status`` the API answers on success."""
    pod = object_store.get("Pod", namespace, name)
    if not _ignores_budget(pod):
        budgets = [b for b in object_store.list("PodDisruptionBudget", namespace)
                   if _selects(b, pod)]
        if len(budgets) > 1:
            message = "This pod has more than one PodDisruptionBudget, which the eviction " \
                      "subresource does not support."
            raise apiresources.RequestRefused(500, "InternalError", message)
        if budgets and disruptions_allowed(budgets[0], object_store.list("Pod", namespace)) < 1:
            raise apiresources.RequestRefused(429, "TooManyRequests", VIOLATES)
    object_store.delete("Pod", namespace, name)
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}


def disruptions_allowed(budget: store.Obj, pods: list[store.Obj]) -> int:
    """How many of the budget's healthy pods may go now (the disruption controller's
    ``status.disruptionsAllowed``)."""
    matching = [p for p in pods if _selects(budget, p)]
    healthy = sum(1 for p in matching if _healthy(p))
    spec = budget.get("spec") or {}
    if "minAvailable" in spec:
        desired = _scaled(spec["minAvailable"], len(matching))
    elif "maxUnavailable" in spec:
        desired = len(matching) - _scaled(spec["maxUnavailable"], len(matching))
    else:
        return 0
    return max(healthy - desired, 0)


def _scaled(value: int | str, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)


def _ignores_budget(pod: store.Obj) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase in _NO_BUDGET_CHECK or bool(pod["metadata"].get("deletionTimestamp"))


def _healthy(pod: store.Obj) -> bool:
    status = pod.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or ())
    return status.get("phase") == "Running" and ready


def _selects(budget: store.Obj, pod: store.Obj) -> bool:
    """policy/v1: an empty selector selects every pod of the namespace, a null one none."""
    selector = (budget.get("spec") or {}).get("selector")
    if selector is None:
        return False
    return _label_selector(selector).matches(pod["metadata"].get("labels"))


def _label_selector(selector: Mapping[str, Any]) -> selectors.LabelSelector:
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    terms = [selectors.Requirement(k, "=", frozenset({v}))
             for k, v in (selector.get("matchLabels") or {}).items()]
    terms += [selectors.Requirement(e["key"], ops[e["operator"]], frozenset(e.get("values") or ()))
              for e in selector.get("matchExpressions") or ()]
    return selectors.LabelSelector(tuple(terms))
