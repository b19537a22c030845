"""What ``gpuguard audit`` reads (``model.audit.AuditView``): Kubernetes objects through
lightkube (read-only: ``list``, plus ``GET /version``) and Prometheus' loaded rules and a few
instant queries (docs/audit.md).

Nodes must be readable (without them there is nothing to audit: ``SourceError``). Any other
input that cannot be read — forbidden, not served, Prometheus down — is recorded in the view's
``missing`` with the error, so the rules that need it say "not checked (why)". A custom
resource whose type is not installed (Karpenter's NodeClaims, the GPU Operator's
ClusterPolicy, KubeRay's RayJobs) is read as none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from lightkube import Client
from lightkube.generic_resource import create_global_resource
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import ConfigMap, Event, Pod
from lightkube.resources.policy_v1 import PodDisruptionBudget

from gpuguard.catalog import dcgm_fields
from gpuguard.clients import kube as api_errors
from gpuguard.clients import kube_lists
from gpuguard.clients import prometheus as query
from gpuguard.errors import GpuguardError, NotFoundError, SourceError
from gpuguard.model import audit, fleet
from gpuguard.model import metric_names as names
from gpuguard.model import settings as settings_model
from gpuguard.model.audit import Input
from gpuguard.sources import (
    fleet_health,
    gang_pods,
    kubernetes,
    prometheus,
    workloads,
)

NodeClaim = create_global_resource("karpenter.sh", "v1", "NodeClaim", "nodeclaims")
ClusterPolicy = create_global_resource("nvidia.com", "v1", "ClusterPolicy", "clusterpolicies")
SYSTEM_NAMESPACE = "kube-system"
ADMISSION_REASON = "UnexpectedAdmissionError"
SERIES_OF_INTEREST = (
    names.XID_TOTAL,
    *(field.name for field in dcgm_fields.FIELDS),
    *sorted(dcgm_fields.ALIASES),
)
CORDONED_72H = f"min_over_time({names.KSM_NODE_UNSCHEDULABLE}[72h]) == 1"

Objs = tuple[audit.Obj, ...]


class AuditReader:
    """Reads one ``AuditView`` through one lightkube client and (optionally) Prometheus."""

    def __init__(
        self,
        client: Client,
        prometheus_url: str | None,
        timeout_s: float = 10.0,
        scopes: Mapping[str, str] | None = None,
    ) -> None:
        self._client = client
        self._scopes = dict(scopes or {})  # prometheus.scrape_scope (model.promql_scope)
        self._api = kube_lists.SharedApi(lambda: client.config)
        self._prom = prometheus_url.rstrip("/") if prometheus_url else None
        self._timeout_s = timeout_s

    def read(self, at: datetime, settings: settings_model.GuardSettings) -> audit.AuditView:
        objects: dict[Input, Objs] = {}
        missing: dict[Input, str] = {}
        # raw JSON, not lightkube's models: a malformed field the audit does not read (a
        # condition's lastTransitionTime) on one node must not make every node unreadable
        objects[Input.NODES] = self._api.get().list_all(kube_lists.NODES, dict).items
        for what, read in self._readers().items():
            try:
                objects[what] = tuple(read())
            except GpuguardError as e:
                missing[what] = str(e)
        version = self._version(missing)
        rules, series, nodes = self._prometheus(at, missing)
        samples = self._fleet_health(at, settings, missing)
        pods = (gang_pods.workload_pod(p) for p in objects.get(Input.PODS, ()))
        return audit.AuditView(
            at, objects, version, rules, series, nodes, missing, settings.hygiene,
            settings.fleet, tuple(p for p in pods if not p.finished), samples,
            fleet_health.pod_gpus(samples),
        )

    def _fleet_health(
        self, at: datetime, settings: settings_model.GuardSettings, missing: dict[Input, str]
    ) -> tuple[fleet.MetricSample, ...]:
        """The fleet-health plan's samples (``sources.fleet_health``), read as the controller
        reads them: stale or partial answers refused."""
        if self._prom is None:
            missing[Input.PROM_FLEET_HEALTH] = "no Prometheus URL given"
            return ()
        try:
            return health_samples(self._prom, at, settings, self._timeout_s)
        except SourceError as e:
            missing[Input.PROM_FLEET_HEALTH] = str(e)
            return ()

    def _readers(self) -> dict[Input, Callable[[], Iterable[audit.Obj]]]:
        rayjobs = workloads.WorkloadReader(self._client).rayjobs
        return {
            Input.PODS: lambda: self._list(Pod, "Pods", namespace="*"),
            Input.JOBS: lambda: self._list(Job, "Jobs", namespace="*"),
            Input.DEPLOYMENTS: lambda: self._list(Deployment, "Deployments", namespace="*"),
            Input.PDBS: lambda: self._list(PodDisruptionBudget, "PodDisruptionBudgets",
                                           namespace="*"),
            Input.CONFIGMAPS: lambda: self._list(ConfigMap, f"ConfigMaps in {SYSTEM_NAMESPACE}",
                                                 namespace=SYSTEM_NAMESPACE),
            Input.EVENTS: lambda: self._list(Event, f"{ADMISSION_REASON} Events", namespace="*",
                                             fields={"reason": ADMISSION_REASON}),
            Input.NODECLAIMS: lambda: self._optional(NodeClaim, "NodeClaims"),
            Input.CLUSTER_POLICIES: lambda: self._optional(ClusterPolicy, "ClusterPolicies"),
            Input.RAYJOBS: rayjobs,
        }

    def _list(self, kind: Any, what: str, **selectors: Any) -> list[audit.Obj]:
        with api_errors.translated(f"listing {what}", SourceError):
            return [_plain(o) for o in self._client.list(kind, **selectors)]

    def _optional(self, kind: Any, what: str) -> list[audit.Obj]:
        """A custom resource: none when its type is not installed (404)."""
        try:
            return self._list(kind, what)
        except NotFoundError:
            return []

    def _version(self, missing: dict[Input, str]) -> str | None:
        try:
            return kubernetes.api_server_version(self._client, self._timeout_s)
        except SourceError as e:
            missing[Input.API_VERSION] = str(e)
            return None

    def _prometheus(
        self, at: datetime, missing: dict[Input, str]
    ) -> tuple[tuple[audit.PromRule, ...], frozenset[str], dict[Input, frozenset[str]]]:
        prom_inputs = (Input.PROM_RULES, Input.PROM_SERIES, Input.PROM_CORDON_72H,
                       Input.PROM_DCGM_NODES)
        if self._prom is None:
            missing.update(dict.fromkeys(prom_inputs, "no Prometheus URL given"))
            return (), frozenset(), {}
        try:
            with query.http(self._timeout_s) as http:
                rules = self._rules(http)
                present = self._labels(http, at, _presence_query(), ("__name__",))
                cordoned = self._labels(http, at, CORDONED_72H, ("node",))
                dcgm = self._labels(http, at, prometheus.node_freshness_query(),
                                    ("Hostname", "hostname"))
        except SourceError as e:
            missing.update(dict.fromkeys(prom_inputs, str(e)))
            return (), frozenset(), {}
        return rules, present, {Input.PROM_CORDON_72H: cordoned, Input.PROM_DCGM_NODES: dcgm}

    def _rules(self, http: query.Http) -> tuple[audit.PromRule, ...]:
        return rules_from(*query.rules(http, self._prom or ""))

    def _labels(
        self, http: query.Http, at: datetime, promql: str, keys: tuple[str, ...]
    ) -> frozenset[str]:
        return label_values(http, self._prom or "", at, promql, keys, self._scopes)


def label_values(
    http: query.Http,
    url: str,
    at: datetime,
    promql: str,
    keys: tuple[str, ...],
    scopes: Mapping[str, str] | None = None,
) -> frozenset[str]:
    """The values of ``keys`` on the series ``promql`` answers at ``at``, scoped to the
    exporters' scrape jobs (``model.promql_scope``); ``SourceError`` on a failed or bad
    answer."""
    answer = query.instant(http, url, promql, promql, at, scopes)
    series = prometheus.parse_answer(promql, answer.status_code, answer.content, "vector")
    return frozenset(v for sample in series for k in keys if (v := sample.labels.get(k)))


def series_present(url: str, at: datetime, timeout_s: float = 10.0) -> frozenset[str]:
    """Which of the series the audit asks about (every DCGM field gpuguard reads, the agent's
    Xid counter) Prometheus has at ``at``."""
    with query.http(timeout_s) as http:
        return label_values(http, url, at, _presence_query(), ("__name__",))


def _presence_query() -> str:
    return f'group by (__name__) ({{__name__=~"{"|".join(SERIES_OF_INTEREST)}"}})'


def rules_from(url: str, status: int, payload: Any) -> tuple[audit.PromRule, ...]:
    """The rules of a ``GET /api/v1/rules`` answer; anything else is a ``SourceError``."""
    if status != 200 or not isinstance(payload, Mapping) or payload.get("status") != "success":
        raise SourceError(f"GET {url}: HTTP {status}, not a rules answer")
    try:
        return tuple(
            audit.PromRule(str(group["name"]), str(rule["name"]), str(rule["query"]))
            for group in payload["data"]["groups"]
            for rule in group["rules"]
        )
    except (KeyError, TypeError) as e:
        raise SourceError(f"GET {url}: malformed rules answer ({e})") from e


def _plain(obj: Any) -> audit.Obj:
    """A lightkube object (or generic resource) as the JSON the API sent."""
    return obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)


def health_samples(
    url: str, at: datetime, settings: settings_model.GuardSettings, timeout_s: float = 10.0
) -> tuple[fleet.MetricSample, ...]:
    """The fleet-health plan's samples at ``at``, read as the controller reads them (stale or
    partial answers refused: ``SourceError``)."""
    plan = fleet_health.HealthQueryPlan.for_settings(settings.fleet)
    source = prometheus.PrometheusSource(url, plan, timeout_s=timeout_s,
                                         staleness=settings.prometheus.staleness,
                                         scopes=settings.prometheus.scrape_scope)
    try:
        return source.samples(at)
    finally:
        source.close()
