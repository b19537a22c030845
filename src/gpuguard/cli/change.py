"""``gpuguard change``: where a declared change's rollout stands, pause / resume / abort it,
and the driver and kernel versions in use per pool (docs/change-management.md)."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from gpuguard.actuators import change_control, jobs
from gpuguard.cli import guard, output
from gpuguard.controller import change as change_step
from gpuguard.controller import wiring
from gpuguard.errors import InputError
from gpuguard.model import change, fleet
from gpuguard.sources import changes, kubernetes, prometheus

app = typer.Typer(
    help="Declared host changes rolled out in canary waves: status, pause, resume, abort, drift.",
    no_args_is_help=True,
)
NameArg = Annotated[str, typer.Argument(help="The change (its ConfigMap's name).")]
PoolOpt = Annotated[str, typer.Option("--pool-label", help="The node label that names a pool.")]


@app.command("status")
def status(
    name: NameArg,
    config: guard.ConfigOpt = None,
    kubeconfig: guard.KubeconfigOpt = None,
    kube_server: guard.ServerOpt = None,
    prometheus_url: guard.PromOpt = None,
    fmt: output.FormatOpt = output.Format.TABLE,
) -> None:
    """Where change NAME stands: its state, waves and each node's step with the reason.

    What the controller would do now; changes nothing.

    Example: gpuguard change status drv-580-159 -o json
    """
    guard.quiet_logs()
    outcome = _preview(name, config, kubeconfig, kube_server, prometheus_url)
    data = status_data(outcome)
    if not output.emit(data, fmt):
        _print_status(data)


def status_data(outcome: change_step.Outcome) -> dict[str, Any]:
    (shown,) = change_step.as_json([outcome])
    plan = outcome.plan
    nodes = [] if plan is None else [
        {"node": a.node, "step": str(a.step), "wave": None if a.wave is None else a.wave + 1,
         "reason": a.reason, "evidence": list(a.evidence)} for a in plan.actions
    ]
    return {**shown, "nodes": nodes}


def _print_status(data: dict[str, Any]) -> None:
    con = output.console
    if data["state"] == "invalid":
        raise InputError(data["error"])
    stopped = data["stopped_by"]
    con.print(output.bold(data["name"]), f": {data['state']}, {data['out']} of {data['pool']} "
              "nodes out for the change" + (f"; stopped by {stopped['node']}: {stopped['check']}"
                                            if stopped else ""), sep="", highlight=False)
    rows = [[str(i + 1), str(w["size"]), w["result"], ", ".join(w["nodes"]) or "-"]
            for i, w in enumerate(data["waves"])]
    output.table("waves", ["wave", "size", "result", "nodes"], rows)
    rows = [[n["node"], n["step"], str(n["wave"] or "-"), n["reason"]] for n in data["nodes"]]
    if rows:
        output.table("nodes", ["node", "step", "wave", "reason"], rows)


def _control(name: str, control: change.Control, config: Any, kubeconfig: Any,
             kube_server: Any) -> None:
    settings = guard.load_settings(config)
    conn = guard.connection(kubeconfig, kube_server, None)
    with wiring.kube_client(conn) as client:
        change_control.ChangeControl(client, settings.controller.namespace).set(name, control)
    output.console.print(f"change {name}: control={control}", highlight=False)


def _control_command(control: change.Control, doc: str) -> Any:
    """A command that writes ``control`` into the change's ConfigMap."""

    def command(name: NameArg, config: guard.ConfigOpt = None,
                kubeconfig: guard.KubeconfigOpt = None,
                kube_server: guard.ServerOpt = None) -> None:
        _control(name, control, config, kubeconfig, kube_server)

    command.__doc__ = doc
    return command


_PAUSE = """Start no new node (nodes being changed still finish).

    Example: gpuguard change pause drv-580-159
    """
_RESUME = """Go on with a paused or aborted rollout.

    Example: gpuguard change resume drv-580-159
    """
_ABORT = """Start nothing new; return the nodes not yet changed.

    Example: gpuguard change abort drv-580-159
    """
app.command("pause")(_control_command(change.Control.PAUSE, _PAUSE))
app.command("resume")(_control_command(change.Control.RUN, _RESUME))
app.command("abort")(_control_command(change.Control.ABORT, _ABORT))


@app.command("drift")
def drift(
    pool_label: PoolOpt = "nvidia.com/gpu.product",
    kubeconfig: guard.KubeconfigOpt = None,
    kube_server: guard.ServerOpt = None,
    fmt: output.FormatOpt = output.Format.TABLE,
) -> None:
    """The driver and kernel versions in use per pool, from the nodes themselves.

    The kernel from status.nodeInfo, the driver from gpu-feature-discovery's label.

    Example: gpuguard change drift --pool-label pool -o json
    """
    conn = guard.connection(kubeconfig, kube_server, None)
    with wiring.kube_client(conn) as client:
        nodes = kubernetes.KubernetesReader(client).nodes()
    data = drift_data(nodes, pool_label)
    if not output.emit(data, fmt):
        rows = [[p["pool"], v["driver"], v["kernel"], str(len(v["nodes"])), ", ".join(v["nodes"])]
                for p in data for v in p["versions"]]
        output.table(f"versions per pool ({pool_label})",
                     ["pool", "driver", "kernel", "nodes", "names"], rows)


def drift_data(nodes: tuple[fleet.Node, ...], pool_label: str) -> list[dict[str, Any]]:
    """Per pool, each (driver, kernel) in use with its nodes; more than one entry is drift."""
    pools: dict[str, dict[tuple[str, str], list[str]]] = defaultdict(lambda: defaultdict(list))
    for node in nodes:
        versions = (change.driver_version(node) or "unknown", node.kernel_version or "unknown")
        pools[node.labels.get(pool_label, "(none)")][versions].append(node.name)
    return [
        {"pool": pool, "drift": len(found) > 1,
         "versions": [{"driver": d, "kernel": k, "nodes": sorted(names)}
                      for (d, k), names in sorted(found.items())]}
        for pool, found in sorted(pools.items())
    ]


def _preview(name: str, config: Any, kubeconfig: Any, kube_server: Any,
             prometheus_url: str | None) -> change_step.Outcome:
    settings = guard.load_settings(config)
    conn = guard.connection(kubeconfig, kube_server, prometheus_url)
    url = prometheus_url or settings.prometheus.url
    checks = prometheus.PrometheusSource(url, changes.ConformancePlan(),
                                         staleness=settings.prometheus.staleness,
                                         timeout_s=settings.prometheus.timeout.total_seconds(),
                                         scopes=settings.prometheus.scrape_scope)
    now = datetime.now(UTC)
    with wiring.kube_client(conn) as client:
        reader = kubernetes.KubernetesReader(client)
        source = changes.ChangeReader(client, settings.controller.namespace)
        snapshot = fleet.FleetSnapshot(taken_at=now, nodes=reader.nodes(), pods=reader.pods())
        step = change_step.Changes(  # the burn-in Jobs are read, never created (no writes)
            source=source, writer=_NoWrites(), checks=checks,
            jobs=jobs.Jobs(client, settings.controller.namespace),
            image=settings.controller.image, kured=changes.KuredLock(client),
            limits=settings.changes)
        try:
            outcomes = step.run(snapshot, now, may_write=lambda: False)
        finally:
            checks.close()
    found = [o for o in outcomes if o.name == name]
    if not found:
        known = ", ".join(o.name for o in outcomes) or "none declared"
        raise InputError(f"change {name}: no such change ConfigMap labelled "
                         f"{change.CONFIGMAP_LABEL} (changes: {known})")
    return found[0]


class _NoWrites:
    """``status`` never writes (the step is run with ``may_write`` false)."""

    def set_schedulable(self, node: fleet.Node, annotations: dict[str, str | None],
                        unschedulable: bool | None) -> None:
        raise AssertionError("gpuguard change status wrote a node")

    def record_event(self, action: Any, now: datetime) -> None:
        raise AssertionError("gpuguard change status recorded an Event")
