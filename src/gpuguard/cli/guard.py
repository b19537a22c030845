"""``gpuguard once`` and ``gpuguard explain``: one tick against a live cluster and Prometheus,
shown as decisions with their reasons and evidence."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuguard.cli import inputs, output, return_checklist
from gpuguard.controller import change as change_step
from gpuguard.controller import leader, tick, wiring
from gpuguard.errors import GpuguardError, InputError, SourceError
from gpuguard.model import bounds, fleet
from gpuguard.model import settings as settings_model
from gpuguard.policy import gpu_route, lifecycle

ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="Settings YAML (GPUGUARD_* env vars override it)."),
]
KubeconfigOpt = Annotated[
    Path | None, typer.Option(help="Kubeconfig file (default: in-cluster, then $KUBECONFIG).")
]
ServerOpt = Annotated[
    str | None,
    typer.Option("--kube-server", help="API server URL without auth, e.g. the one "
                 "`gpuguard sim serve` prints (or use the kubeconfig it writes)."),
]
PromOpt = Annotated[str | None, typer.Option(help="Prometheus base URL (overrides settings).")]
FormatOpt = Annotated[output.Format, typer.Option("--output", "-o", help="table, json or yaml.")]


def load_settings(config: Path | None) -> settings_model.GuardSettings:
    """The settings of ``--config`` and ``GPUGUARD_*``; InputError names the file or variable."""
    return settings_model.GuardSettings.load(config, os.environ)


def connection(kubeconfig: Path | None, server: str | None, prom: str | None) -> wiring.Connection:
    """Where the cluster and Prometheus are; a malformed URL is refused naming its flag."""
    for flag, url in (("--kube-server", server), ("--prometheus-url", prom)):
        if url is not None:
            check_url(url, flag)
    return wiring.Connection(kubeconfig=kubeconfig, kube_server=server, prometheus_url=prom)


def check_url(url: str, flag: str) -> str:
    """``url`` if it is an http(s) URL with a host and a valid port; InputError otherwise."""
    try:
        return bounds.http_url(url)
    except InputError as e:
        raise InputError(f"{flag} {e}") from e


def require_decision(
    result: tick.TickResult, conn: wiring.Connection, settings: settings_model.GuardSettings
) -> None:
    """A command that could not answer exits non-zero: SourceError with the tick's error and
    where it asked (the API server and Prometheus it was pointed at)."""
    if not result.ok:
        cluster = conn.kube_server or conn.kubeconfig or "the default kubeconfig"
        prom = conn.prometheus_url or settings.prometheus.url
        raise SourceError(
            f"no decision (fail closed): {result.error} (API server: {cluster}; "
            f"Prometheus: {prom})"
        )


def run_tick(
    settings: settings_model.GuardSettings, conn: wiring.Connection, *, dry_run: bool
) -> tick.TickResult:
    with wiring.build_guard(settings, conn, dry_run=dry_run) as (guard, _):
        return guard.tick()


def decision_rows(result: tick.TickResult) -> list[dict[str, Any]]:
    if result.decision is None:
        return []
    skipped = {id(action): why for action, why in result.skipped}
    rows = [
        {
            "node": a.node,
            "decision": str(a.kind),
            "reason": str(a.reason),
            "detail": a.detail,
            "done": skipped.get(id(a), "applied"),
            "evidence": [e.describe() for e in a.evidence],
        }
        for a in result.decision.actions
    ]
    rows += [
        {
            "node": f.node,
            "decision": "finding",
            "reason": str(f.reason),
            "detail": f.detail,
            "done": "-",
            "evidence": [e.describe() for e in f.evidence],
        }
        for f in (*result.decision.findings, *result.silent)
    ]
    rows += [
        {"node": "-", "decision": "step failed closed", "reason": step, "detail": failure,
         "done": "nothing done", "evidence": []}
        for step, failure in result.step_errors
    ]  # fmt: skip
    return rows


def once(
    dry_run: Annotated[bool, typer.Option(help="Decide and print; change nothing.")] = False,
    config: ConfigOpt = None,
    kubeconfig: KubeconfigOpt = None,
    kube_server: ServerOpt = None,
    prometheus_url: PromOpt = None,
    fmt: FormatOpt = output.Format.TABLE,
) -> None:
    """Run ONE guard tick: read the cluster and Prometheus, decide, act (unless --dry-run).

    Prints every decision with its reason and evidence. Exit 0 after a tick that decided,
    1 when the tick could not decide (bad, partial or stale Prometheus answer: nothing done).

    Example: gpuguard once --dry-run --prometheus-url http://prometheus:9090 -o json
    """
    quiet_logs()
    settings = load_settings(config)
    conn = connection(kubeconfig, kube_server, prometheus_url)
    result = run_tick(settings, conn, dry_run=dry_run)
    data = {
        "at": result.at.isoformat(),
        "error": result.error,
        "breaker": result.decision.breaker.describe() if result.decision else None,
        "decisions": decision_rows(result),
    }
    if not output.emit(data, fmt) and result.ok:
        _print_tick(result)
    require_decision(result, conn, settings)


def quiet_logs() -> None:
    """Commands that report a failure as their one error line: no duplicate log warning."""
    logging.basicConfig(level=logging.ERROR)


def _print_tick(result: tick.TickResult) -> None:
    rows = decision_rows(result)
    output.table(
        f"tick at {result.at:%Y-%m-%d %H:%M:%S}Z — {result.decision.breaker.describe()}"
        if result.decision
        else "tick",
        ["node", "decision", "reason", "done", "evidence"],
        [
            [r["node"], r["decision"], r["reason"], r["done"], "\n".join(r["evidence"])]
            for r in rows
        ],
    )
    if not rows:
        output.console.print("no node needs action; nothing to report")


def explain(
    node: Annotated[str, typer.Argument(parser=inputs.node_name, help="Node name.")],
    config: ConfigOpt = None,
    kubeconfig: KubeconfigOpt = None,
    kube_server: ServerOpt = None,
    prometheus_url: PromOpt = None,
    fmt: FormatOpt = output.Format.TABLE,
) -> None:
    """Why NODE is where it is: its lifecycle state, gpuguard's marks on it, and what the
    guard decides about it now, with the evidence (a dry-run tick; changes nothing).

    For a node gpuguard isolated, the return-to-pool checklist too: every condition in order
    (PASS / FAIL / UNKNOWN) and the step it leads to (hold, wait, burn-in, uncordon); and, for
    a pool opted in to remediation, what gpuguard's own repair would do (docs/remediation.md).

    Example: gpuguard explain gpu-node-b -o json
    """
    quiet_logs()
    settings = load_settings(config)
    conn = connection(kubeconfig, kube_server, prometheus_url)
    result = run_tick(settings, conn, dry_run=True)
    found = result.snapshot.node(node) if result.snapshot else None
    if result.snapshot is not None and found is None:
        raise InputError(f"no node named {node!r} in the cluster")
    data = _explanation(node, found, result)
    if not output.emit(data, fmt):
        _print_explanation(data)
    require_decision(result, conn, settings)


def _explanation(name: str, node: fleet.Node | None, result: tick.TickResult) -> dict[str, Any]:
    return {
        "node": name,
        "state": str(lifecycle.state_of(node)) if node else "unknown",
        "gpus": f"{node.gpu_allocatable}/{node.gpu_capacity} allocatable" if node else "unknown",
        "gpuguard_annotations": lifecycle.gpuguard_marks(node) if node else {},
        "decisions": [r for r in decision_rows(result) if r["node"] == name],
        "breaker": result.decision.breaker.describe() if result.decision else None,
        "error": result.error,
        "return_checklist": _checklist(name, result),
        "phantom_gpus": _phantoms(name, result),
        "gpu_isolation": _gpu_isolation(name, node, result),
        "change": change_step.explain(node, result.changes),
        "gpu_route": _route(node),
        "remediation": _remediation(name, result),
    }


def _remediation(name: str, result: tick.TickResult) -> dict[str, str] | None:
    """What gpuguard's own repair would do now (docs/remediation.md; None: not a candidate,
    or no pool opted in). In explain's dry-run tick nothing is done: ``done`` says dry-run."""
    for outcome in result.remediations:
        if outcome.decision.node == name:
            d = outcome.decision
            return {"step": str(d.step), "detail": d.detail, "done": outcome.done}
    return None


def _route(node: fleet.Node | None) -> dict[str, str] | None:
    """How a GPU of this node would be kept out, by its cluster type (docs/gpu-isolation.md);
    from its labels: ResourceSlices are not read here (gpuguard gpu-isolate taint-rule)."""
    if node is None or not node.gpu_capacity:
        return None
    found = gpu_route.route(node)
    return {"route": str(found.route), "why": found.why, "gpuguard_does": found.built}


def _gpu_isolation(
    name: str, node: fleet.Node | None, result: tick.TickResult
) -> dict[str, Any] | None:
    """The node's isolated GPUs, the mechanisms keeping each out, and what the guard would do
    about them now (docs/gpu-isolation.md)."""
    entries = node.marks.gpus if node else ()
    if not entries:
        return None
    step = next((o for o in result.gpus if o.node == name), None)
    return {
        "gpus": [
            {"gpu": e.index, "uuid": e.uuid, "mechanism": e.mechanism, "fault": e.fault,
             "applied_boot": e.applied_boot[:8], "confirmed": e.confirmed,
             "returning": e.returning}
            for e in entries
        ],
        "step": str(step.step) if step else None,
        "detail": step.detail if step else "",
    }


def _phantoms(name: str, result: tick.TickResult) -> list[dict[str, Any]]:
    """This node's GPUs busy with nothing, with the commands that gather the evidence."""
    found = result.phantom.phantoms if result.phantom else ()
    return [
        {
            "gpu": p.gpu,
            "wasted_w": round(p.wasted_w, 1),
            "hours": round(p.hours, 2),
            "commands": [f"[{c.run_on}] {c.command}" for c in p.commands],
            "advice": list(p.advice),
        }
        for p in found
        if p.node == name
    ]


def _checklist(name: str, result: tick.TickResult) -> dict[str, Any] | None:
    """The return-to-pool checklist of a node gpuguard isolated (None for any other node)."""
    for outcome in result.returns:
        if outcome.decision.node == name:
            return {**return_checklist.as_data(outcome.decision), "done": outcome.done}
    return None


def _print_explanation(data: dict[str, Any]) -> None:
    con = output.console
    con.print(output.bold(data["node"]), f": {data['state']}, GPUs {data['gpus']}", sep="")
    for key, value in data["gpuguard_annotations"].items():
        con.print(f"  gpuguard.io/{key}: {value}")
    for row in data["decisions"]:
        con.print(f"- {row['decision']} ", output.bold(row["reason"]), f" {row['detail']}", sep="")
        for line in row["evidence"]:
            con.print(f"    evidence: {line}")
    if not data["decisions"] and not data["error"]:
        con.print("- the guard sees nothing to act on or report for this node now")
    if data["breaker"]:
        con.print(data["breaker"])
    for gpu in data["phantom_gpus"]:
        con.print(
            f"- phantom: GPU {gpu['gpu']} busy with nothing for {gpu['hours']} h,"
            f" ~{gpu['wasted_w']} W wasted (reported, not cordoned by default)"
        )
        for command in gpu["commands"]:
            con.print(f"    {command}", highlight=False)
    isolated = data["gpu_isolation"]
    if isolated:
        for gpu in isolated["gpus"]:
            con.print(
                f"- GPU {gpu['gpu']} ({gpu['uuid']}) isolated for {gpu['fault']}: "
                f"{gpu['mechanism']}, applied on boot {gpu['applied_boot'] or '-'}"
            )
        con.print(f"  now: {isolated['step']}: {isolated['detail']}", highlight=False)
    route = data["gpu_route"]
    if route:
        con.print(f"- GPU route: {route['route']} ({route['why']}): {route['gpuguard_does']}",
                  highlight=False)
    repair = data.get("remediation")
    if repair:
        done = "" if repair["done"] == "-" else f" ({repair['done']})"
        con.print(f"- remediation: {repair['step']}{done}: {repair['detail']}", highlight=False)
    checklist = data["return_checklist"]
    if checklist:
        done = "" if checklist["done"] == "-" else f"; {checklist['done']}"
        title = f"return to pool: {checklist['step']} ({checklist['reason']}{done})"
        output.table(title, return_checklist.COLUMNS, return_checklist.rows(checklist))
        con.print(checklist["detail"], highlight=False, soft_wrap=True)
    _print_change(data.get("change"))


def _print_change(data: dict[str, Any] | None) -> None:
    """The node's place in declared change rollouts (docs/change-management.md)."""
    if data is None:
        return
    for row in data["rollout"]:
        wave = f" wave {row['wave']}" if row["wave"] else ""
        output.console.print(f"- change {row['change']}{wave}: {row['step']}: {row['reason']}",
                             highlight=False)
    if data["gpu_operator"]:
        output.console.print(f"- {data['gpu_operator']}", highlight=False)


def status(
    config: ConfigOpt = None,
    kubeconfig: KubeconfigOpt = None,
    kube_server: ServerOpt = None,
    prometheus_url: PromOpt = None,
    fmt: FormatOpt = output.Format.TABLE,
) -> None:
    """The fleet at a glance: nodes by lifecycle state, the breaker, who leads, and whether
    the guard can decide right now (a dry-run tick; changes nothing).

    Example: gpuguard status -o json
    """
    quiet_logs()
    settings = load_settings(config)
    conn = connection(kubeconfig, kube_server, prometheus_url)
    with wiring.build_guard(settings, conn, dry_run=True) as (built, client):
        result = built.tick()
        c = settings.controller
        lease = _lease(leader.KubeLeases(client, c.lease_name, c.namespace))
    data = _status(result, lease)
    if not output.emit(data, fmt):
        _print_status(data)
    require_decision(result, conn, settings)


def _lease(leases: leader.LeaseStore) -> dict[str, Any]:
    try:
        stored = leases.read()
    except GpuguardError as e:
        return {"error": str(e)}
    if stored is None:
        return {"holder": None}
    record = stored.record
    renewed = record.renew_time.isoformat() if record.renew_time else None
    return {"holder": record.holder or None, "renewed": renewed}


def _status(result: tick.TickResult, lease: dict[str, Any]) -> dict[str, Any]:
    by_state: dict[str, list[str]] = {}
    for node in result.snapshot.nodes if result.snapshot else ():
        by_state.setdefault(str(lifecycle.state_of(node)), []).append(node.name)
    return {
        "at": result.at.isoformat(),
        "nodes": by_state,
        "breaker": result.decision.breaker.describe() if result.decision else None,
        "leader": lease,
        "can_decide": result.ok,
        "error": result.error,
        "pending_actions": [a.node for a in result.decision.actions] if result.decision else [],
        "withheld": _withheld(result),
        "fleet_health": _fleet_health(result),
    }


def _fleet_health(result: tick.TickResult) -> dict[str, Any] | None:
    """Nodes that throttle or flap persistently, and the scheduling and interconnect findings
    standing now (docs/fleet-health.md); None when the step did not run."""
    health = result.fleet_health
    if health is None:
        return None
    return {
        "persistent": [{"node": n.node, "reasons": list(n.reasons)} for n in health.persistent],
        "findings": [
            {"kind": f.kind, "node": f.node, "gpu": f.gpu, "detail": f.detail}
            for f in health.findings
        ],
        "not_checked": list(health.unchecked),
    }


def _withheld(result: tick.TickResult) -> list[dict[str, str]]:
    """Faults the breaker withholds: pending, isolated when it allows if they still hold."""
    marks = result.decision.withheld if result.decision else {}
    return [
        {"node": node, "reason": str(m.reason), "fault": m.fault, "since": m.since.isoformat()}
        for node, m in sorted(marks.items())
    ]


def _print_status(data: dict[str, Any]) -> None:
    rows = [[state, str(len(names)), ", ".join(names[:8]) + (" ..." if len(names) > 8 else "")]
            for state, names in sorted(data["nodes"].items())]
    output.table(f"nodes at {data['at']}", ["state", "count", "nodes"], rows)
    con = output.console
    con.print(data["breaker"] or "breaker: unknown (no decision)")
    lease = data["leader"]
    con.print(f"leader: {lease.get('holder') or 'none'}"
              + (f" (renewed {lease['renewed']})" if lease.get("renewed") else "")
              + (f" — lease unreadable: {lease['error']}" if lease.get("error") else ""))
    for item in data["withheld"]:
        con.print(
            f"withheld: {item['node']} {item['fault']} since {item['since']}"
            f" ({item['reason']}; pending, isolated when the breaker allows)",
            highlight=False,
        )
    health = data.get("fleet_health") or {}
    for item in health.get("persistent", []):
        reasons = "; ".join(item["reasons"])
        con.print(f"persistently unhealthy: {item['node']}: {reasons}", highlight=False)
    for finding in health.get("findings", []):
        con.print(f"{finding['kind']}: {finding['detail']}", highlight=False, soft_wrap=True)
    for why in health.get("not_checked", []):
        con.print(f"not checked: {why}", highlight=False)
    if data["can_decide"]:
        pending = ", ".join(data["pending_actions"]) or "-"
        con.print(f"guard can decide now; would act on: {pending}")
