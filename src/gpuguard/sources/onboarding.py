"""What the onboarding gate reads (``model.onboarding.GateView``): the Node and the cluster's
other Nodes, the API server's ``GET /version``, the node's burn-in Jobs (lightkube), and the
agent's ``gpuguard_check_status`` from Prometheus — the agent stays read-only towards the API
server, so its checks reach the gate through Prometheus (docs/onboarding.md).

Errors are ``SourceError`` (``NotFoundError`` for a node that does not exist) through
``clients.kube``, the one translator of Kubernetes API errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from lightkube import Client
from lightkube.resources.batch_v1 import Job

from gpuguard.clients import kube as api_errors
from gpuguard.clients import kube_lists
from gpuguard.clients import prometheus as query
from gpuguard.errors import NotFoundError, SourceError
from gpuguard.model import (
    annotation_keys,
    decisions,
    jobs,
    node_conditions,
    onboarding,
)
from gpuguard.model import metric_names as names
from gpuguard.sources import kubernetes, prometheus, return_facts


class GateReader:
    """Reads the gate's view of one node through one lightkube client."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._api = kube_lists.SharedApi(lambda: client.config)

    def read(
        self,
        name: str,
        check_status: dict[str, decisions.CheckStatus],
        *,
        namespace: str,
        read_version: bool,
    ) -> onboarding.GateView:
        """The view of ``name``; ``read_version`` asks the API server for ``GET /version``.

        Nodes are read as raw JSON (``kube_lists``), not lightkube's typed models: one field
        the gate never reads (a condition's malformed ``lastTransitionTime``) on any node
        must not make the whole list unreadable."""
        nodes = self._api.get().list_all(kube_lists.NODES, gate_node).items
        node = next((n for n in nodes if n.name == name), None)
        if node is None:
            raise NotFoundError(f"reading Node {name}: not found (404)")
        version, unreadable = self._version() if read_version else (None, None)
        return onboarding.GateView(
            node=node,
            others=tuple(n for n in nodes if n.name != name),
            burnin_jobs=self._burnin_jobs(name, namespace),
            check_status=check_status,
            api_server_version=version,
            version_unreadable=unreadable,
        )

    def _version(self) -> tuple[str | None, str | None]:
        try:
            return kubernetes.api_server_version(self._client), None
        except SourceError as e:
            return None, str(e)

    def _burnin_jobs(self, node: str, namespace: str) -> tuple[onboarding.BurninJob, ...]:
        with api_errors.translated(f"listing burn-in Jobs in {namespace}", SourceError):
            found = self._client.list(
                Job, namespace=namespace, labels={annotation_keys.BURNIN_NODE_LABEL: node}
            )
            return tuple(burnin_job(j) for j in found)


def gate_node(node: Mapping[str, Any]) -> onboarding.GateNode:
    """The gate's view of a Node object as the API server sent it (raw JSON)."""
    meta, spec = _mapping(node.get("metadata")), _mapping(node.get("spec"))
    status = _mapping(node.get("status"))
    info = _mapping(status.get("nodeInfo"))
    taints = spec.get("taints")
    return onboarding.GateNode(
        name=str(meta.get("name") or "?"),
        resource_version=_text(meta.get("resourceVersion")),
        kubelet_version=_text(info.get("kubeletVersion")),
        labels={str(k): str(v) for k, v in _mapping(meta.get("labels")).items()},
        taints=tuple(t for t in taints if isinstance(t, dict)) if isinstance(taints, list)
        else (),
        malformed_times=node_conditions.malformed_times(status.get("conditions")),
    )


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(value: object) -> str | None:
    return str(value) if value is not None else None


def burnin_job(job: Job) -> onboarding.BurninJob:
    meta, status = job.metadata, job.status
    created = meta.creationTimestamp if meta else None
    if status and (status.succeeded or 0) > 0:
        state = jobs.JobState.SUCCEEDED
    elif status and (status.failed or 0) > 0:
        state = jobs.JobState.FAILED
    else:
        state = jobs.JobState.RUNNING
    return onboarding.BurninJob(
        (meta.name if meta else None) or "?", created.isoformat() if created else "", state
    )


def check_statuses(
    prometheus_url: str | None,
    node: str,
    timeout_s: float = 10.0,
    scopes: Mapping[str, str] | None = None,
) -> dict[str, decisions.CheckStatus]:
    """The agent's current status per check on ``node``; empty when Prometheus has none (or
    no Prometheus is given). A bad answer is a ``SourceError``. The query is the return facts'
    own, scoped to the node (every label a series may name its node in), so any Prometheus
    that answers gpuguard's queries answers it, the simulator's emulation included; and to the
    agent's scrape job when ``prometheus.scrape_scope`` names it (docs/security.md
    #metric-forgery)."""
    if not prometheus_url:
        return {}
    plan = return_facts.ReturnFactsPlan(nodes=(node,))
    promql = plan.queries()[names.CHECK_STATUS]
    with query.http(timeout_s) as client:
        answer = query.instant(client, prometheus_url, names.CHECK_STATUS, promql, None, scopes)
    series = prometheus.parse_answer(promql, answer.status_code, answer.content, "vector")
    return return_facts.conformance([replace(s, name=names.CHECK_STATUS) for s in series])
