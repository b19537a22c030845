"""One hostile (or admitted) request and how the chart's admission policies answer it.

A ``Case`` is a real API request's shape: the object, its stored form (``old``, for UPDATE and
DELETE), the operation, the subresource, the user and the user's extra attributes (a pod-bound
token's claims). ``answer`` evaluates every ValidatingAdmissionPolicy the chart renders with
the case's values, each through ``tests.cel.refusals`` after the policy's matchConstraints
(resource, operation, namespace) as the API server applies them, and returns which policies
refuse it with which rules: ``{}`` is admitted."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any

from tests import cel, chart

Obj = dict[str, Any]

RESOURCES = {  # kind -> (API group, resource)
    "Pod": ("", "pods"), "Job": ("batch", "jobs"), "Node": ("", "nodes"),
    "ConfigMap": ("", "configmaps"), "Secret": ("", "secrets"),
    "Lease": ("coordination.k8s.io", "leases"),
    "DeviceTaintRule": ("resource.k8s.io", "devicetaintrules"),
    "ResourceClaim": ("resource.k8s.io", "resourceclaims"),
    "ResourceClaimTemplate": ("resource.k8s.io", "resourceclaimtemplates"),
    "TokenRequest": ("", "serviceaccounts"), "PodExecOptions": ("", "pods"),
    "PodAttachOptions": ("", "pods"), "PodPortForwardOptions": ("", "pods"),
    "Eviction": ("", "pods"), "DaemonSet": ("apps", "daemonsets"),
}
CHANGE_TEMPLATES = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
    "name": "gpuguard-change-templates", "namespace": "kube-system"}, "data": {
    "taint.image": "registry.example/ops/kubectl:1.31", "taint.script": "true\n"}}


@dataclass(frozen=True)
class Case:
    """``target``: the object a subresource request names when its body is not that object
    (the pod of an exec, the service account of a TokenRequest)."""

    attacker: str
    name: str
    tries: str
    obj: Obj | None
    username: str
    refused_by: dict[str, list[str]]
    operation: str = "CREATE"
    old: Obj | None = None
    extra: dict[str, list[str]] | None = None
    subresource: str = ""
    target: str = ""
    values: Obj | None = field(default=None, compare=False)

    @property
    def id(self) -> str:
        return f"{self.attacker}/{self.name}"


def _request_object(case: Case) -> Obj:
    found = case.obj if case.obj is not None else case.old
    assert found is not None, case.id
    return found


def _namespace(case: Case) -> str:
    namespace: str = _request_object(case).get("metadata", {}).get("namespace", "")
    return namespace or (chart.NAMESPACE if case.target else "")


def _rule_matches(rule: Obj, group: str, resource: str, operation: str) -> bool:
    return (operation in rule["operations"] or "*" in rule["operations"]) and (
        group in rule["apiGroups"] or "*" in rule["apiGroups"]) and (
        resource in rule["resources"]
        or ("*" in rule["resources"] and "/" not in resource)
        or "*/*" in rule["resources"])  # every resource and every subresource


def matches(policy: Obj, case: Case) -> bool:
    """The policy's matchConstraints: resource (with subresource), operation, namespace."""
    constraints = policy["spec"]["matchConstraints"]
    group, resource = RESOURCES[_request_object(case)["kind"]]
    if case.subresource:
        resource += "/" + case.subresource
    if not any(_rule_matches(r, group, resource, case.operation)
               for r in constraints["resourceRules"]):
        return False
    selector = constraints.get("namespaceSelector", {}).get("matchLabels", {})
    return not selector or selector.get("kubernetes.io/metadata.name") == _namespace(case)


@functools.cache
def _policies(values_json: str) -> list[Obj]:
    values = json.loads(values_json) if values_json != "null" else None
    templates = [*sorted(chart.CHART.glob("templates/admission*.yaml")),
                 chart.CHART / "templates" / "validatingadmissionpolicy.yaml"]
    return [obj for template in templates for obj in chart.render(template.name, values)
            if obj["kind"] == "ValidatingAdmissionPolicy"]


def policies(values: Obj | None) -> list[Obj]:
    return _policies(json.dumps(values, sort_keys=True))


def answer(case: Case) -> dict[str, list[str]]:
    """Which policies refuse the request, and by which rules (``{}``: admitted)."""
    refused: dict[str, list[str]] = {}
    for policy in policies(case.values):
        if not matches(policy, case):
            continue
        params = CHANGE_TEMPLATES if "paramKind" in policy["spec"] else None
        messages = cel.refusals(policy, case.obj, username=case.username, old=case.old,
                                operation=case.operation, params=params, extra=case.extra)
        if messages:
            refused[policy["metadata"]["name"]] = cel.rule_names(messages)
    return refused
