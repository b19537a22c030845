"""``gpuguard audit``: a read-only review of a live cluster (Kubernetes API + Prometheus)
against the rule catalogue (docs/audit.md): findings with rule ID, severity, objects,
evidence, public source and fix; rules whose input could not be read are "not checked (why)"."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuguard.cli import audit_html, guard, output
from gpuguard.controller import wiring
from gpuguard.model.audit import SEVERITIES, RuleResult, RuleStatus, Severity
from gpuguard.policy.audit import catalogue, registry
from gpuguard.sources import audit as audit_source

EXIT_CLEAN, EXIT_FINDINGS = 0, 1


def audit(
    fail_on: Annotated[Severity, typer.Option(
        help="Exit 1 when a finding is at least this severe (high, medium, low, info).",
    )] = Severity.MEDIUM,
    html: Annotated[Path | None, typer.Option(
        "--html", help="Also write the report as one self-contained HTML file.",
    )] = None,
    config: guard.ConfigOpt = None,
    kubeconfig: guard.KubeconfigOpt = None,
    kube_server: guard.ServerOpt = None,
    prometheus_url: guard.PromOpt = None,
    fmt: guard.FormatOpt = output.Format.TABLE,
) -> None:
    """Review the cluster for the gaps behind real GPU incidents: long cordons that silence
    alerts, device plugins where one lost GPU fails every allocation, Xid alerts on the wrong
    series, node repair replacing GPU nodes, no spare capacity, version skew, risky workloads.

    Read-only. Exit 0: no finding at --fail-on or above; 1: such findings (or the API server
    could not be read); 2: bad input. A rule whose input could not be read (RBAC, no
    Prometheus) is listed as not checked, never as passed.

    Example: gpuguard audit --prometheus-url http://prometheus:9090 --html audit.html
    """
    guard.quiet_logs()
    settings = guard.load_settings(config)
    conn = guard.connection(kubeconfig, kube_server, prometheus_url)
    prom = conn.prometheus_url or settings.prometheus.url
    with wiring.kube_client(conn) as client:
        reader = audit_source.AuditReader(client, prom, settings.prometheus.timeout.total_seconds(),
                                          settings.prometheus.scrape_scope)
        view = reader.read(datetime.now(UTC), settings)
    results = registry.run(view, catalogue.RULES)
    cluster = conn.kube_server or str(conn.kubeconfig or "default kubeconfig")
    data = report(results, view.at, cluster, prom)
    if html is not None:
        html.write_text(audit_html.render(data), encoding="utf-8")
        # on stderr: stdout stays the report (-o json pipes cleanly)
        output.errors.print(f"wrote the HTML report to {html.resolve()}")
    if not output.emit(data, fmt):
        _print(data)
    worst = [f for r in results for f in r.findings if f.severity.rank >= fail_on.rank]
    raise typer.Exit(EXIT_FINDINGS if worst else EXIT_CLEAN)


def report(
    results: tuple[RuleResult, ...], at: datetime, cluster: str, prom: str
) -> dict[str, Any]:
    """The audit as plain data: the summary by severity, then every rule's result."""
    findings = [f for r in results for f in r.findings]
    summary = {str(s): sum(f.severity is s for f in findings) for s in SEVERITIES}
    summary["not-checked"] = sum(r.status is RuleStatus.NOT_CHECKED for r in results)
    summary["rules"] = len(results)
    ordered = sorted(results, key=lambda r: -max((f.severity.rank for f in r.findings),
                                                  default=-1))
    return {"at": at.isoformat(), "cluster": cluster, "prometheus": prom, "summary": summary,
            "rules": [r.as_dict() for r in ordered]}


def _print(data: dict[str, Any]) -> None:
    rows = [
        [f["severity"], r["rule"], "\n".join(f["objects"]), f["evidence"], f["fix"]]
        for severity in SEVERITIES
        for r in data["rules"]
        for f in r["findings"]
        if f["severity"] == severity
    ]
    s = data["summary"]
    counts = ", ".join(f"{k} {s[str(k)]}" for k in SEVERITIES)
    output.table(f"audit at {data['at']}: {counts}", ["severity", "rule", "objects",
                                                      "evidence", "fix"], rows)
    unchecked = [[r["rule"], r["why"]] for r in data["rules"] if r["status"] == "not-checked"]
    if unchecked:
        output.table("not checked", ["rule", "why"], unchecked)
    passed = [r["rule"] for r in data["rules"] if r["status"] == "no-finding"]
    output.console.print(f"checked, no finding: {', '.join(passed) or '-'}")
