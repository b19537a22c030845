"""``gpuguard gate NODE``: the onboarding gate — read the facts, decide, untaint or report.

The decision is ``policy.gate.decide``; this is its imperative shell. Facts: the Node and the
cluster's other Nodes (lightkube), the API server's ``GET /version`` (``--api-server-version``
overrides it; the control-plane kubelet stands in only when it cannot be read), the agent's
``gpuguard_check_status`` from Prometheus (the agent stays read-only towards the API server:
no write RBAC on a DaemonSet on every node), and the newest burn-in Job labelled
``gpuguard.io/burnin-node=NODE``. Applied as ONE merge patch guarded by the node's
resourceVersion: the report annotation always, and the taint list without
``gpuguard.io/onboarding`` only when the gate passed; plus an Event on the Node.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any

import httpx
import httpx2
import lightkube
import typer
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Event, Node
from lightkube.types import PatchType

from gpuguard import errors
from gpuguard.cli import guard, output
from gpuguard.controller import wiring
from gpuguard.model import annotation_keys, decisions
from gpuguard.model import metric_names as names
from gpuguard.policy import gate as gate_policy
from gpuguard.sources import kubernetes, prometheus

EXIT_PASSED, EXIT_FAILED, EXIT_UNKNOWN = 0, 1, 2
FLAG_SOURCE = "--api-server-version"


# ---- facts ---------------------------------------------------------------------------------


def _labels(node: Node) -> dict[str, str]:
    return dict(node.metadata.labels or {}) if node.metadata else {}


def _kubelet(node: Node) -> str | None:
    info = node.status.nodeInfo if node.status else None
    return info.kubeletVersion if info else None


def _tainted(node: Node) -> bool:
    taints = node.spec.taints if node.spec else None
    return any(t.key == annotation_keys.ONBOARDING_TAINT for t in taints or [])


def api_server_version(
    client: lightkube.Client, nodes: list[Node], given: str | None
) -> tuple[str | None, str]:
    """The API server's version and where it came from: the flag, else ``GET /version``, else
    (when that cannot be read) the newest control-plane kubelet's — RKE2 servers run the
    kubelet and the API server from one release."""
    if given:
        return given, FLAG_SOURCE
    try:
        return kubernetes.api_server_version(client), gate_policy.VERSION_ENDPOINT_SOURCE
    except errors.SourceError as e:
        return control_plane_version(nodes, unreadable=str(e))


def control_plane_version(nodes: list[Node], unreadable: str) -> tuple[str | None, str]:
    """The newest control-plane kubelet's version; the source names why /version was not used."""
    planes = [n for n in nodes if gate_policy.is_control_plane(_labels(n)) and _kubelet(n)]
    if not planes:
        return None, f"no control-plane node to fall back to; {unreadable}"
    newest = max(planes, key=lambda n: gate_policy.parse_version(_kubelet(n)) or (0, 0, 0))
    name = newest.metadata.name if newest.metadata else "?"
    return _kubelet(newest), f"control-plane {name} kubelet; {unreadable}"


def check_statuses(prometheus_url: str | None, node: str) -> dict[str, decisions.CheckStatus]:
    """The agent's current status per check; empty when Prometheus has none for the node."""
    if not prometheus_url:
        return {}
    promql = f'{names.CHECK_STATUS}{{node="{node}"}} == 1'
    url = prometheus_url.rstrip("/") + "/api/v1/query"
    try:
        with httpx.Client(timeout=10.0) as client:
            response = client.get(url, params={"query": promql})
    except httpx.HTTPError as e:
        raise errors.SourceError(f"Prometheus query {promql!r} failed: {e}") from e
    series = prometheus.parse_answer(promql, response.status_code, response.content, "vector")
    return {
        labels["check"]: decisions.CheckStatus(labels["status"])
        for labels, _ in series
        if labels.get("status") in decisions.CheckStatus.__members__
    }


def smoke(client: lightkube.Client, node: str, namespace: str) -> gate_policy.StepResult:
    step = gate_policy.Step.SMOKE
    label = annotation_keys.BURNIN_NODE_LABEL
    jobs = list(client.list(Job, namespace=namespace, labels={label: node}))
    if not jobs:
        return gate_policy.StepResult(
            step, decisions.CheckStatus.UNKNOWN,
            f"no burn-in Job labelled {annotation_keys.BURNIN_NODE_LABEL}={node} in {namespace}",
        )
    job = max(jobs, key=lambda j: str(j.metadata.creationTimestamp if j.metadata else ""))
    name = job.metadata.name if job.metadata else "?"
    status = job.status
    if status and (status.succeeded or 0) > 0:
        return gate_policy.StepResult(step, decisions.CheckStatus.PASS, f"Job {name} succeeded")
    if status and (status.failed or 0) > 0:
        return gate_policy.StepResult(step, decisions.CheckStatus.FAIL, f"Job {name} failed")
    return gate_policy.StepResult(step, decisions.CheckStatus.UNKNOWN, f"Job {name} not done")


def read_facts(
    client: lightkube.Client, name: str, prometheus_url: str | None, *,
    api_version: str | None, max_minor_skew: int, burnin_namespace: str,
) -> tuple[Node, gate_policy.GateFacts]:
    node = client.get(Node, name)
    everyone = list(client.list(Node))
    peers = tuple(
        _labels(n) for n in everyone
        if n.metadata and n.metadata.name != name and not _tainted(n)
    )
    server, source = api_server_version(client, everyone, api_version)
    facts = gate_policy.GateFacts(
        node=name,
        kubelet_version=_kubelet(node),
        api_server_version=server,
        api_server_source=source,
        labels=_labels(node),
        peer_labels=peers,
        check_status=check_statuses(prometheus_url, name),
        smoke=smoke(client, name, burnin_namespace),
        max_minor_skew=max_minor_skew,
    )
    return node, facts


# ---- applying ------------------------------------------------------------------------------


def gate_patch(node: Node, report: gate_policy.GateReport) -> dict[str, Any]:
    """Report annotation always; the taint list without ours only when the gate passed."""
    metadata = node.metadata
    patch: dict[str, Any] = {
        "metadata": {
            "resourceVersion": metadata.resourceVersion if metadata else None,
            "annotations": {annotation_keys.GATE_REPORT: json.dumps(report.as_dict())},
        }
    }
    if report.passed and _tainted(node):
        kept = [t.to_dict() for t in (node.spec.taints if node.spec else None) or []
                if t.key != annotation_keys.ONBOARDING_TAINT]
        patch["spec"] = {"taints": kept}
    return patch


def apply(client: lightkube.Client, node: Node, report: gate_policy.GateReport) -> None:
    client.patch(Node, report.node, gate_patch(node, report), patch_type=PatchType.MERGE)
    now = datetime.now(UTC)
    event = Event(
        metadata=ObjectMeta(name=f"{report.node}.gpuguard-gate.{now:%Y%m%d%H%M%S%f}"),
        involvedObject=ObjectReference(kind="Node", name=report.node, apiVersion="v1"),
        reason="OnboardingGatePassed" if report.passed else "OnboardingGateBlocked",
        message=_event_message(report),
        type="Normal" if report.passed else "Warning",
        source=EventSource(component="gpuguard"),
        firstTimestamp=now,
        lastTimestamp=now,
        count=1,
    )
    client.create(event, namespace="default")


def _event_message(report: gate_policy.GateReport) -> str:
    details = "; ".join(f"{s.step} {s.status}: {s.evidence}" for s in report.steps)
    return f"{report.summary()}. {details}"[:1024]


def exit_code(report: gate_policy.GateReport) -> int:
    statuses = {s.status for s in report.steps}
    if report.passed:
        return EXIT_PASSED
    return EXIT_FAILED if decisions.CheckStatus.FAIL in statuses else EXIT_UNKNOWN


# ---- the command ---------------------------------------------------------------------------

NodeArg = Annotated[str, typer.Argument(help="The node to admit.")]
ApiVersionOpt = Annotated[
    str | None,
    typer.Option(
        help="The API server's version (default: its GET /version; when that cannot be read, "
        "the newest control-plane node's kubelet)."
    ),
]
SkewOpt = Annotated[int, typer.Option(min=0, help="Minor versions the kubelet may lag.")]
NamespaceOpt = Annotated[str, typer.Option(help="Namespace of the burn-in Jobs.")]
DryRunOpt = Annotated[bool, typer.Option(help="Decide and print; change nothing.")]


def gate(
    node: NodeArg,
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
    conn = guard.connection(kubeconfig, kube_server, prometheus_url)
    try:
        with wiring.kube_client(conn) as client:
            live, facts = read_facts(
                client, node, prometheus_url, api_version=api_server_version,
                max_minor_skew=max_minor_skew, burnin_namespace=burnin_namespace,
            )
            report = gate_policy.decide(facts)
            if not dry_run:
                apply(client, live, report)
    except (lightkube.ApiError, httpx2.HTTPError, errors.GpuguardError) as e:
        output.errors.print(f"[red]error:[/red] {_describe(e, node)}")
        raise typer.Exit(EXIT_UNKNOWN) from e
    _print(report, dry_run, fmt)
    raise typer.Exit(exit_code(report))


def _describe(error: Exception, node: str) -> str:
    if isinstance(error, lightkube.ApiError) and error.status and error.status.code == 404:
        return f"node {node!r} not found"
    if isinstance(error, lightkube.ApiError) and error.status and error.status.code == 409:
        return f"node {node!r} changed while the gate ran (409); run it again"
    return str(error)


def _print(report: gate_policy.GateReport, dry_run: bool, fmt: output.Format) -> None:
    if output.emit({**report.as_dict(), "dry_run": dry_run}, fmt):
        return
    rows = [(str(s.step), str(s.status), s.evidence) for s in report.steps]
    output.table(f"onboarding gate: {report.node}", ("step", "status", "evidence"), rows)
    suffix = " (dry run: nothing changed)" if dry_run else ""
    output.console.print(report.summary() + suffix, highlight=False)
