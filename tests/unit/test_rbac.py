"""The controller's RBAC is derived from its code: every lightkube call the controller can
make (``gpuguard run``: the modules reachable from ``controller.wiring`` and
``controller.leader``) is read from the source as (resource, verb, where), and the chart must
grant exactly those — a grant no call needs, or a call no grant allows, fails here.

Requests sent without lightkube's verbs (``clients.kube_lists``: raw paged lists and watches)
are declared in the module's ``RAW_CALLS`` — (kind, verb) pairs, cluster-wide — which the
module enforces at run time; the scanner reads that declaration."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from tests import chart

SRC = Path(__file__).resolve().parents[2] / "src"
ENTRY_POINTS = ("gpuguard.controller.serve", "gpuguard.controller.wiring",
                "gpuguard.controller.leader", "gpuguard.cli.run")
VERBS = {"get": "get", "list": "list", "watch": "watch", "create": "create",
         "replace": "update", "patch": "patch", "delete": "delete", "apply": "patch"}
CLUSTER, OWN, DEFAULT = "cluster", "release-namespace", "default"
NAMESPACE_ATTRIBUTES = {
    "_namespace": OWN, "_events_namespace": DEFAULT, "events_namespace": DEFAULT,
    "pod_namespace": CLUSTER,  # the evicted pod's own namespace: any
    "kured_namespace": "kube-system",  # kured's DaemonSet (values: changes.kured.namespace)
    "workload_namespace": CLUSTER,  # Events on workloads, in their own namespace
    "_templates_namespace": "kube-system",  # the admin's Job templates (changes.jobTemplates)
    "secrets_namespace": OWN,  # the BMC Secrets (remediation.bmc_secrets), by name
}
CLUSTER_SCOPED = {"Node", "Node.Status", "DeviceTaintRule", "ResourceSlice"}
PLURAL = {"Node": "nodes", "Pod": "pods", "Job": "jobs", "ConfigMap": "configmaps",
          "Lease": "leases", "Event": "events", "Eviction": "pods/eviction",
          "DeviceTaintRule": "devicetaintrules", "ResourceSlice": "resourceslices",
          "DaemonSet": "daemonsets", "Secret": "secrets", "Node.Status": "nodes/status"}
Use = tuple[str, str, str]  # (resource, verb, where)
OPT_IN: dict[Use, tuple[tuple[str, ...], Any]] = {  # a call made only when a setting is on:
    # its value path and a value that turns it on
    ("pods/eviction", "create", CLUSTER): (("controller", "settings", "gpu_isolation",
                                            "evict_pods"), True),
    # docs/remediation.md: the BMC Secrets, by name; the hand-off's node condition
    ("secrets", "get", OWN): (("controller", "settings", "remediation", "bmc_secrets"),
                              {"gpu-node-b": "bmc-gpu-node-b"}),
    ("nodes/status", "patch", CLUSTER): (("controller", "settings", "remediation",
                                          "hand_off_pools"), ["NVIDIA-H100-80GB-HBM3"]),
}


def module_path(name: str) -> Path | None:
    base = SRC / name.replace(".", "/")
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.exists():
            return path
    return None


def reachable(entry_points: tuple[str, ...]) -> set[str]:
    """gpuguard modules imported, transitively, by the entry points (not the CLI's others)."""
    seen: set[str] = set()
    todo = list(entry_points)
    while todo:
        name = todo.pop()
        path = module_path(name)
        if name in seen or path is None:
            continue
        seen.add(name)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gpuguard"):
                module = str(node.module)
                todo += [module, *(f"{module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                todo += [a.name for a in node.names if a.name.startswith("gpuguard")]
    return {m for m in seen if not m.startswith("gpuguard.cli.") or m == "gpuguard.cli.run"}


class Calls(ast.NodeVisitor):
    """Collects ``<...>client.<verb>(...)`` calls and resolves the resource each one names."""

    def __init__(self, tree: ast.Module) -> None:
        self.returns = {f.name: _name(f.returns) for f in ast.walk(tree)
                        if isinstance(f, ast.FunctionDef)}
        self.uses: set[Use] = set()
        self.unresolved: list[str] = []
        self.local: dict[str, str | None] = {}

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.local = {a.arg: _name(a.annotation) for a in node.args.args}
        for inner in ast.walk(node):
            if isinstance(inner, ast.Assign) and len(inner.targets) == 1 and isinstance(
                    inner.targets[0], ast.Name):
                self.local[inner.targets[0].id] = self.resource_of(inner.value)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if (isinstance(func, ast.Attribute) and func.attr in VERBS
                and _name(func.value) in {"client", "_client"} and node.args):
            resource = self.resource_of(node.args[0])
            if resource is None:
                self.unresolved.append(ast.unparse(node))
            else:
                self.uses.add((PLURAL[resource], VERBS[func.attr], self.where(node, resource)))
        self.generic_visit(node)

    def resource_of(self, expr: ast.expr) -> str | None:
        if isinstance(expr, ast.Name):
            return expr.id if expr.id in PLURAL else self.local.get(expr.id)
        if isinstance(expr, ast.Attribute) and expr.attr == "Status":  # Node.Status: subresource
            return f"{_name(expr.value)}.Status"
        if isinstance(expr, ast.Call):
            callee = _name(expr.func)
            if callee == "cast" and expr.args:
                return _name(expr.args[0])
            if callee in PLURAL:
                return callee
            return self.returns.get(callee or "")
        return None

    @staticmethod
    def where(node: ast.Call, resource: str) -> str:
        namespace = next((k.value for k in node.keywords if k.arg == "namespace"), None)
        if resource in CLUSTER_SCOPED or (
                isinstance(namespace, ast.Constant) and namespace.value == "*"):
            return CLUSTER
        if isinstance(namespace, ast.Attribute):
            return NAMESPACE_ATTRIBUTES[namespace.attr]
        if isinstance(namespace, ast.Name):  # a parameter that names where, e.g. events_namespace
            return NAMESPACE_ATTRIBUTES[namespace.id]
        return OWN  # replace(): the object read from gpuguard's namespace names it


def _name(expr: ast.expr | None) -> str | None:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return expr.attr
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr.value
    if isinstance(expr, ast.Subscript) and _name(expr.value) == "type":  # type[Kind]: Kind
        return _name(expr.slice)
    return None


def raw_calls(tree: ast.Module) -> set[Use]:
    """A module's declared ``RAW_CALLS`` as uses (cluster-wide)."""
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == "RAW_CALLS":
            return {(PLURAL[kind], VERBS[verb], CLUSTER) for kind, verb in ast.literal_eval(value)}
    return set()


def uses_lightkube(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.ImportFrom) and (n.module or "").startswith("lightkube")
               for n in ast.walk(tree))


def derived() -> set[Use]:
    uses: set[Use] = set()
    for module in sorted(reachable(ENTRY_POINTS)):
        path = module_path(module)
        assert path is not None
        tree = ast.parse(path.read_text())
        uses |= raw_calls(tree)
        if not uses_lightkube(tree):
            continue  # an httpx client (Prometheus, webhooks): no Kubernetes API
        calls = Calls(tree)
        calls.visit(tree)
        assert not calls.unresolved, f"{module}: cannot tell the resource of {calls.unresolved}"
        uses |= calls.uses
    cluster = {(r, v) for r, v, w in uses if w == CLUSTER}
    return {(r, v, w) for r, v, w in uses if w == CLUSTER or (r, v) not in cluster}


def opted_in() -> dict[str, Any]:
    """The chart's values with every opt-in call's setting on."""
    values = chart.defaults()
    for path, value in OPT_IN.values():
        node = values
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return values


def granted(values: dict[str, Any] | None = None) -> set[Use]:
    """What the chart grants gpuguard's service account, by where the grant applies."""
    roles = {(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")): o
             for o in chart.by_kind("ClusterRole", values) + chart.by_kind("Role", values)}
    grants: set[Use] = set()
    for binding in (chart.by_kind("ClusterRoleBinding", values)
                    + chart.by_kind("RoleBinding", values)):
        if {"kind": "ServiceAccount", "name": "gpuguard",
                "namespace": chart.NAMESPACE} not in binding["subjects"]:
            continue
        namespace = binding["metadata"].get("namespace")
        ref = binding["roleRef"]
        scope = None if ref["kind"] == "ClusterRole" else namespace
        role = roles[(ref["kind"], ref["name"], scope)]
        where = {None: CLUSTER, chart.NAMESPACE: OWN}.get(namespace, namespace)
        grants |= {(resource, verb, where) for rule in role["rules"]
                   for resource in rule["resources"] for verb in rule["verbs"]}
    return grants


def test_the_chart_grants_exactly_what_the_controllers_code_calls() -> None:
    uses = derived()
    assert uses, "no lightkube call found: the scanner is broken"
    assert granted(opted_in()) == uses, (
        f"granted but never called: {sorted(granted(opted_in()) - uses)}; "
        f"called but not granted: {sorted(uses - granted(opted_in()))}"
    )
    opted = chart.defaults()
    opted["changes"] = {**opted["changes"], "drainWindow": True}
    others = {u for u in OPT_IN if u[0] != "pods/eviction"}  # the remediation's, still off
    assert granted(opted) == uses - others  # the drain window's eviction, once opted in


def test_an_opt_in_call_is_granted_only_when_its_setting_is_on() -> None:
    assert set(OPT_IN) <= derived()
    assert granted() == derived() - set(OPT_IN)


def test_the_scanner_sees_the_calls_it_is_meant_to_see() -> None:
    uses = derived()
    assert ("nodes", "patch", CLUSTER) in uses
    assert ("events", "create", CLUSTER) in uses  # Nodes' in default, workloads' in theirs
    assert ("leases", "update", OWN) in uses
    assert ("pods", "list", CLUSTER) in uses
    assert {("nodes", "watch", CLUSTER), ("pods", "watch", CLUSTER)} <= uses  # RAW_CALLS
    deletes = {u for u in uses if u[1] in {"delete", "deletecollection"}}
    assert deletes == {("devicetaintrules", "delete", CLUSTER)}, "gpuguard deletes only its taints"


def test_the_bmc_secrets_are_granted_by_name_only() -> None:
    """docs/security.md: `get` on the Secrets remediation.bmc_secrets names, no list, no
    other Secret; none at all while it is empty."""
    (role,) = [r for r in chart.by_kind("Role", opted_in())
               if r["metadata"]["name"] == "gpuguard-bmc-secrets"]  # fmt: skip
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"],
                              "resourceNames": ["bmc-gpu-node-b"], "verbs": ["get"]}]
    assert not [r for r in chart.by_kind("Role") if r["metadata"]["name"] == "gpuguard-bmc-secrets"]
