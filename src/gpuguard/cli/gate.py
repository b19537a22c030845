"""``gpuguard gate NODE``: the onboarding gate — read the facts, decide, untaint or report.

Only flags and printing live here: ``sources.onboarding`` reads the node, the cluster, the API
server's version, the burn-in Jobs and the agent's checks; ``policy.gate`` decides;
``actuators.onboarding`` writes the report annotation (and, when the gate passed, the taint
list without ``gpuguard.io/onboarding``) in ONE merge patch guarded by the node's
resourceVersion, and an Event on the Node (docs/onboarding.md).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated

import typer

from gpuguard import errors
from gpuguard.actuators import onboarding as gate_writer
from gpuguard.cli import guard, inputs, output
from gpuguard.controller import wiring
from gpuguard.model import decisions
from gpuguard.policy import gate as gate_policy
from gpuguard.sources import onboarding as gate_reader

EXIT_PASSED, EXIT_FAILED, EXIT_UNKNOWN = 0, 1, 2
FLAG_SOURCE = gate_policy.FLAG_SOURCE


def _event_message(report: gate_policy.GateReport) -> str:
    details = "; ".join(f"{s.step} {s.status}: {s.evidence}" for s in report.steps)
    return f"{report.summary()}. {details}"


def exit_code(report: gate_policy.GateReport) -> int:
    statuses = {s.status for s in report.steps}
    if report.passed:
        return EXIT_PASSED
    return EXIT_FAILED if decisions.CheckStatus.FAIL in statuses else EXIT_UNKNOWN


# ---- the command ---------------------------------------------------------------------------

NodeArg = Annotated[str, typer.Argument(parser=inputs.node_name, help="The node to admit.")]
ApiVersionOpt = Annotated[
    str | None,
    typer.Option(
        help="The API server's version (default: its GET /version; when that cannot be read, "
        "the newest control-plane node's kubelet)."
    ),
]
SkewOpt = Annotated[int, typer.Option(min=0, help="Minor versions the kubelet may lag.")]
NamespaceOpt = Annotated[
    str, typer.Option(parser=inputs.namespace, help="Namespace of the burn-in Jobs.")
]
DryRunOpt = Annotated[bool, typer.Option(help="Decide and print; change nothing.")]


def gate(
    node: NodeArg,
    config: guard.ConfigOpt = None,
    kubeconfig: guard.KubeconfigOpt = None,
    kube_server: guard.ServerOpt = None,
    prometheus_url: guard.PromOpt = None,
    api_server_version: ApiVersionOpt = None,
    max_minor_skew: SkewOpt = 0,
    burnin_namespace: NamespaceOpt = "gpuguard",
    dry_run: DryRunOpt = False,
    fmt: guard.FormatOpt = output.Format.TABLE,
) -> None:
    """Admit a new node: remove gpuguard.io/onboarding=pending:NoSchedule only if it passes.

    Steps: kubelet-version (not newer than the API server, read from its GET /version unless
    --api-server-version is given; minor lag <= --max-minor-skew), role-labels (the node-role
    label and value the existing workers carry), conformance (the agent's gpuguard_check_status
    in Prometheus: any FAIL fails, any UNKNOWN or no agent keeps the taint) and smoke (the
    newest burn-in Job labelled gpuguard.io/burnin-node=NODE must have succeeded). WARN does
    not block; FAIL and UNKNOWN keep the taint. The report is written to the
    gpuguard.io/gate-report annotation and an Event either way.

    \b
    Exit codes: 0 passed (taint removed), 1 a step failed, 2 a step unknown or bad input.

    \b
    Examples:
      gpuguard gate gpu-node-17 --prometheus-url http://prometheus:9090
      gpuguard gate gpu-node-17 --prometheus-url http://prometheus:9090 --dry-run -o json
      gpuguard gate gpu-node-17 --api-server-version v1.34.3+rke2r1 --dry-run
    """
    scopes = guard.load_settings(config).prometheus.scrape_scope  # docs/security.md
    conn = guard.connection(kubeconfig, kube_server, prometheus_url)
    try:
        checks = gate_reader.check_statuses(prometheus_url, node, scopes=scopes)
        with wiring.kube_client(conn) as client:
            view = gate_reader.GateReader(client).read(
                node, checks, namespace=burnin_namespace, read_version=not api_server_version
            )
            facts = gate_policy.facts_from(
                view, api_version=api_server_version, max_minor_skew=max_minor_skew,
                namespace=burnin_namespace,
            )
            report = gate_policy.decide(facts)
            if not dry_run:
                gate_writer.GateWriter(client).apply(
                    view.node, json.dumps(report.as_dict()), _event_message(report),
                    passed=report.passed, now=datetime.now(UTC),
                )
    except errors.InputError:
        raise
    except errors.GpuguardError as e:
        output.error_line(_describe(e, node))
        raise typer.Exit(EXIT_UNKNOWN) from e
    _print(report, dry_run, fmt)
    raise typer.Exit(exit_code(report))


def _describe(error: errors.GpuguardError, node: str) -> str:
    if isinstance(error, errors.NotFoundError):
        return f"node {node!r} not found"
    if isinstance(error, errors.ConflictError):
        return f"node {node!r} changed while the gate ran (409); run it again"
    return str(error)


def _print(report: gate_policy.GateReport, dry_run: bool, fmt: output.Format) -> None:
    if output.emit({**report.as_dict(), "dry_run": dry_run}, fmt):
        return
    rows = [(str(s.step), str(s.status), s.evidence) for s in report.steps]
    output.table(f"onboarding gate: {report.node}", ("step", "status", "evidence"), rows)
    suffix = " (dry run: nothing changed)" if dry_run else ""
    output.console.print(report.summary() + suffix, highlight=False)
