"""``gpuguard health NODE``: fit to run training, yes or no, with the reasons
(``policy.fitness``; docs/audit.md#health-verdict)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpuguard.cli import guard, inputs, output
from gpuguard.controller import tick, wiring
from gpuguard.errors import InputError, SourceError
from gpuguard.model import fleet
from gpuguard.model import settings as settings_model
from gpuguard.policy import fitness, interconnect
from gpuguard.sources import audit as audit_source
from gpuguard.sources import onboarding

EXIT_FIT, EXIT_NOT_FIT = 0, 1


def health(
    node: Annotated[str, typer.Argument(parser=inputs.node_name, help="Node name.")],
    config: guard.ConfigOpt = None,
    kubeconfig: guard.KubeconfigOpt = None,
    kube_server: guard.ServerOpt = None,
    prometheus_url: guard.PromOpt = None,
    fmt: guard.FormatOpt = output.Format.TABLE,
) -> None:
    """Is NODE fit to run training? yes/no with the reasons: its state, what the guard
    decides about it now (a dry-run tick), faults the breaker withheld, isolated or missing
    GPUs, the node agent's conformance checks and its last burn-in.

    Exit 0: fit; 1: not fit (or a check could not be read: never a yes); 2: bad input.

    Example: gpuguard health gpu-node-b -o json
    """
    guard.quiet_logs()
    settings = guard.load_settings(config)
    conn = guard.connection(kubeconfig, kube_server, prometheus_url)
    result = guard.run_tick(settings, conn, dry_run=True)
    found = _node(result, node, conn, settings)
    prom = conn.prometheus_url or settings.prometheus.url
    with wiring.kube_client(conn) as client:
        statuses = onboarding.check_statuses(prom, node, scopes=settings.prometheus.scrape_scope)
        view = onboarding.GateReader(client).read(
            node, statuses, namespace=settings.controller.namespace, read_version=False)
    decision = result.decision
    said = fitness.guard_said(decision.actions if decision else (),
                              (*decision.findings, *result.silent) if decision else (), node)
    problems, unread = _links(prom, result, node, settings)
    facts = fitness.FitnessFacts(found, result.at, said, None if result.ok else result.error,
                                 view.check_status, view.burnin_jobs, problems, unread,
                                 _dcgm_series(prom, result, settings), view.node.malformed_times)
    required = settings.return_to_pool.require_conformance
    verdict = fitness.verdict(facts, require_conformance=required)
    data: dict[str, Any] = {"node": node, "fit": verdict.fit, "reasons": verdict.reasons(),
                            "checks": [c.as_dict() for c in verdict.checks]}
    if not output.emit(data, fmt):
        output.console.print(output.bold(f"{node}: fit to run training: "
                                         f"{'yes' if verdict.fit else 'no'}"))
        output.table("checks", ["check", "status", "detail"],
                     [[c["check"], c["status"], c["detail"]] for c in data["checks"]])
    raise typer.Exit(EXIT_FIT if verdict.fit else EXIT_NOT_FIT)


def _links(
    prom: str, result: tick.TickResult, node: str, settings: settings_model.GuardSettings
) -> tuple[tuple[str, ...], str | None]:
    """The node's throttling and interconnect problems now (``policy.interconnect``), or why
    they could not be read."""
    try:
        samples = audit_source.health_samples(prom, result.at, settings,
                                              settings.prometheus.timeout.total_seconds())
    except SourceError as e:
        return (), str(e)
    found = interconnect.detect(samples, settings.fleet)
    problems = fitness.link_problems(node, found, interconnect.persistent(samples,
                                                                          settings.fleet))
    missing = interconnect.unchecked(samples)
    return problems, (f"no series for {', '.join(missing)}" if missing and not problems
                      else None)


def _dcgm_series(
    prom: str, result: tick.TickResult, settings: settings_model.GuardSettings
) -> frozenset[str] | None:
    """The DCGM series Prometheus has now, for the telemetry check; None when unread."""
    try:
        return audit_source.series_present(prom, result.at,
                                           settings.prometheus.timeout.total_seconds())
    except SourceError:
        return None


def _node(
    result: tick.TickResult, name: str, conn: wiring.Connection,
    settings: settings_model.GuardSettings,
) -> fleet.Node:
    if result.snapshot is None:
        guard.require_decision(result, conn, settings)
        raise SourceError("the cluster could not be read")
    found = result.snapshot.node(name)
    if found is None:
        raise InputError(f"no node named {name!r} in the cluster")
    return found
