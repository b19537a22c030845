"""Per-GPU telemetry over a window from Prometheus: what phantom and utilization policies read.

A second query plan beside the guard's (``sources.prometheus``): for each dcgm-exporter field
that tells busy from idle (util, SM/GR engine/tensor/DRAM activity, occupancy, framebuffer,
power, P-state, SM clock) its min, max and average over the window and its current value, plus
whether each GPU already reported at the window's start, the most GPUs live pods held on each
node in the window (kube-state-metrics, the alert rules' join), the minutes the simple
phantom signature held in a longer lookback, and the most processes the gpuguard agent saw on
each GPU in the window (``gpuguard_gpu_processes``; absent where no agent runs: "not
collected", never zero). A constant number of instant queries, whatever the fleet size,
evaluated at one instant (``time=``), so ``--at`` reads history as it was; the guard's plan
(``GpuQueryPlan.for_settings``) asks the per-GPU ones only of the nodes a candidate query
names, in batches of node matchers, so its answers grow with candidates, not the fleet.

Answers are parsed and validated by ``sources.prometheus.parse_answer``; a bad answer or no
dcgm-exporter data newer than the staleness bound is a ``SourceError`` (fail closed).
``windows_from_samples`` folds the named samples into one ``fleet.GpuWindow`` per GPU and
``processes_from_samples`` into the UUID -> process count map the phantom policy reads; the
demo's world view produces the same named samples.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from statistics import fmean
from types import TracebackType

from gpuguard.clients import prometheus as query
from gpuguard.errors import SourceError
from gpuguard.model import fleet, series, subquery
from gpuguard.model import metric_names as names
from gpuguard.model import settings as settings_model
from gpuguard.sources import node_scope, prometheus

METRICS = names.GPU_TELEMETRY
FRESHNESS = names.FRESHNESS_DCGM
_GPU = f'resource="{names.GPU_RESOURCE_LABEL}"'
# The alert rules' gpuguard:node_gpu_requests:active_pods: GPUs held by Pending/Running pods.
ACTIVE_GPU_PODS = (
    f"sum by (node) (sum by (namespace, pod) ({names.KSM_POD_REQUESTS}{{{_GPU}}})"
    f" * on (namespace, pod) group_left (node) max by (namespace, pod, node)"
    f' ({names.KSM_POD_INFO}{{node!=""}})'
    f" * on (namespace, pod) group_left () max by (namespace, pod)"
    f' ({names.KSM_POD_PHASE}{{phase=~"Pending|Running"}}))'
)
# kube-state-metrics has no pod series on a node without GPU pods, so the sum has no element
# for it: every node it reports GPU capacity for gets an explicit zero, and "no GPU pod on the
# node" reads 0 (a phantom's own case: its job's pods are gone), never "unknown".
NODE_GPU_PODS = (
    f"({ACTIVE_GPU_PODS}) or (0 * max by (node) ({names.KSM_NODE_CAPACITY}{{{_GPU}}}))"
)
# dcgm-exporter's own pod (GPU Operator: nvidia-dcgm-exporter-*, Helm chart: dcgm-exporter-*).
EXPORTER_POD = re.compile(r"dcgm-exporter")


@dataclass(frozen=True, slots=True)
class GpuQueryPlan:
    """The queries for one evaluation, by the sample name they are stored under.

    Unscoped (what ``gpuguard utilization`` reads), every GPU's window. Scoped (the guard's
    phantom check, ``for_settings``), the per-GPU queries are asked only of the nodes with a GPU
    that may be phantom (``node_queries``): a series without a workload pod (``pod_of``) that
    stayed busy over the window — min util >= ``util_min_pct``, or min SM or graphics engine
    active > ``sm_active_min`` — which every phantom GPU has (``policy.phantom``: busy, no pod).
    A node's every GPU is asked, so the policy counts its labelled GPUs as before; a healthy
    fleet's answer is almost empty (docs/design.md#phantom-utilization)."""

    window: timedelta
    signature_lookback: timedelta = timedelta(hours=24)
    util_min_pct: float = 95.0
    fb_used_max_mib: float = 100.0
    step: timedelta = timedelta(seconds=30)
    sm_active_min: float = 0.0
    scoped: bool = False

    @classmethod
    def for_settings(cls, phantom: settings_model.PhantomSettings) -> GpuQueryPlan:
        """The guard's plan: the phantom settings' window and thresholds, scoped."""
        return cls(
            window=phantom.hold,
            signature_lookback=phantom.age_lookback,
            util_min_pct=phantom.util_min_pct,
            fb_used_max_mib=phantom.fb_used_max_mib,
            sm_active_min=phantom.sm_active_min,
            scoped=True,
        )

    def queries(self) -> dict[str, str]:
        """Unscoped, every query; scoped, the fleet-wide ones (candidates first)."""
        signature = (
            f"{names.DCGM_GPU_UTIL} >= {self.util_min_pct:g}"
            f" and {names.DCGM_FB_USED} < {self.fb_used_max_mib:g}"
        )
        fleet_wide = {
            names.NODE_GPU_PODS_MAX: (
                f"max_over_time(({NODE_GPU_PODS})"
                f"[{subquery.promql_range(self.window)}:{prometheus.promql_duration(self.step)}])"
            ),
            names.PHANTOM_SIGNATURE_MINUTES: (
                f"count_over_time(({signature})"
                f"[{subquery.promql_range(self.signature_lookback)}:1m])"
            ),
            FRESHNESS: prometheus.freshness_queries()[FRESHNESS],
        }
        if self.scoped:
            return {names.PHANTOM_CANDIDATE_NODES: self._candidates()} | fleet_wide
        return self.node_queries(None) | fleet_wide

    def node_queries(self, nodes: Sequence[str] | None) -> dict[str, str]:
        """The per-GPU queries, of the GPUs of ``nodes`` only (any node label); None: all."""
        if nodes is None:
            return self._per_gpu(lambda metric, around: around.format(metric))
        return self._per_gpu(lambda metric, around: node_scope.selector(metric, nodes, around))

    def _per_gpu(self, select: Callable[[str, str], str]) -> dict[str, str]:
        w, r = prometheus.promql_duration(self.window), subquery.promql_range(self.window)
        plan = {
            names.window_stat(metric, stat): select(metric, _stat_around(stat, r))
            for metric in METRICS
            for stat in names.WINDOW_STATS
        }
        return plan | {
            names.GPU_SEEN_AT_WINDOW_START: select(names.DCGM_GPU_UTIL, f"{{}} offset {w}"),
            names.GPU_PROCESSES_MAX: (
                f"max by (node, uuid) ({select(names.GPU_PROCESSES, f'max_over_time({{}}[{r}])')})"
            ),
        }

    def _candidates(self) -> str:
        """The nodes with a series of util, SM or graphics engine activity, without a workload
        pod (neither ``exported_pod`` nor a ``pod`` other than the exporter's own), busy over
        the whole window; labels: the node's, as each exporter names it."""
        r = subquery.promql_range(self.window)
        busy = {names.DCGM_GPU_UTIL: f">= {self.util_min_pct!r}",
                names.DCGM_SM_ACTIVE: f"> {self.sm_active_min!r}",
                names.DCGM_GR_ENGINE_ACTIVE: f"> {self.sm_active_min!r}"}  # fmt: skip
        unlabelled = ('exported_pod="", pod=""',
                      f'exported_pod="", pod=~".*{EXPORTER_POD.pattern}.*"')  # fmt: skip
        terms = (f"min_over_time({metric}{{{matchers}}}[{r}]) {test}"
                 for metric, test in busy.items() for matchers in unlabelled)  # fmt: skip
        return f"group by ({', '.join(series.NODE_LABELS)}) ({' or '.join(terms)})"


def _stat_around(stat: str, window: str) -> str:
    return "{}" if stat == "last" else f"{stat}_over_time({{}}[{window}])"


@dataclass(frozen=True, slots=True)
class GpuReadings:
    """One evaluation: every GPU's window, and GPU UUID -> the most processes the agent saw
    on it in the window (None: no agent reported a process list)."""

    windows: tuple[fleet.GpuWindow, ...]
    processes: Mapping[str, int] | None = None


class GpuMetricsSource:
    """Reads one evaluation's per-GPU windows from the Prometheus HTTP API."""

    def __init__(
        self,
        base_url: str,
        plan: GpuQueryPlan,
        *,
        staleness: timedelta = timedelta(minutes=2),
        client: query.Http | None = None,
        timeout_s: float = 10.0,
        max_regex_chars: int = node_scope.MATCHER_CHARS,
        most_batches: int = node_scope.MOST_BATCHES,
        scopes: Mapping[str, str] | None = None,
    ) -> None:
        self._base_url = base_url
        self._plan = plan
        self._scopes = dict(scopes or {})  # prometheus.scrape_scope (model.promql_scope)
        self._max_chars, self._most_batches = max_regex_chars, most_batches
        self._staleness = staleness
        self._client = client or query.http(timeout_s)
        self.queries_issued = 0

    def __enter__(self) -> GpuMetricsSource:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def windows(self, at: datetime) -> tuple[fleet.GpuWindow, ...]:
        return self.readings(at).windows

    def readings(self, at: datetime) -> GpuReadings:
        samples = self.samples(at)
        return GpuReadings(windows_from_samples(samples), processes_from_samples(samples))

    def samples(self, at: datetime) -> tuple[fleet.MetricSample, ...]:
        """Every planned series at instant ``at``; SourceError when any answer is bad or
        dcgm-exporter's newest sample is older than the staleness bound."""
        collected = [s for name, q in self._plan.queries().items() for s in self._ask(name, q, at)]
        if self._plan.scoped:
            collected += self._of_candidates(collected, at)
        stamps = [s.value for s in collected if s.name == FRESHNESS]
        if not stamps:
            raise SourceError("Prometheus has no dcgm-exporter series: refusing to report")
        age = at - datetime.fromtimestamp(max(stamps), UTC)
        if age > self._staleness:
            raise SourceError(
                f"dcgm-exporter: newest sample is {age} old (bound {self._staleness})"
            )
        return tuple(s for s in collected if s.name != FRESHNESS)

    def _of_candidates(
        self, fleet_wide: list[fleet.MetricSample], at: datetime
    ) -> list[fleet.MetricSample]:
        """The per-GPU series of the candidate nodes, in batches that keep each URL short;
        past ``most_batches``, once of the whole fleet and kept of those nodes."""
        nodes = {node for s in fleet_wide if s.name == names.PHANTOM_CANDIDATE_NODES
                 if (node := series.node_of(s.labels))}  # fmt: skip
        batches: list[tuple[str, ...] | None] = list(node_scope.batches(nodes, self._max_chars))
        if len(batches) > self._most_batches:
            batches = [None]
        return [
            s
            for batch in batches
            for name, q in self._plan.node_queries(batch).items()
            for s in self._ask(name, q, at)
            if batch is not None or series.node_of(s.labels) in nodes
        ]

    def _ask(self, name: str, promql: str, at: datetime) -> list[fleet.MetricSample]:
        self.queries_issued += 1
        answer = query.instant(self._client, self._base_url, name, promql, at, self._scopes)
        return prometheus.parse_answer(name, answer.status_code, answer.content, "vector")


# ---- folding samples into windows -----------------------------------------------------------

_GpuKey = tuple[str, str]  # (node, UUID)


def pod_of(labels: Mapping[str, str]) -> str | None:
    """The workload pod dcgm-exporter's mapping put on a series, as ``namespace/pod``.

    Scraped through a ServiceMonitor without ``honorLabels``, the exporter's own target
    labels take ``pod``/``namespace`` and dcgm's arrive as ``exported_pod``/
    ``exported_namespace`` (NVIDIA/dcgm-exporter issue #340); a GPU with no workload
    then still carries ``pod=<the exporter's pod>``, which is not a workload.
    """
    if labels.get("exported_pod"):
        return f"{labels.get('exported_namespace', '')}/{labels['exported_pod']}"
    pod = labels.get("pod", "")
    if not pod or EXPORTER_POD.search(pod):
        return None
    return f"{labels.get('namespace', '')}/{pod}"


def windows_from_samples(samples: Iterable[fleet.MetricSample]) -> tuple[fleet.GpuWindow, ...]:
    """One GpuWindow per (node, UUID) of the plan's named samples. A GPU whose pod changed in
    the window has several series (pod labels differ): their stats are combined."""
    values: dict[_GpuKey, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    facts: dict[_GpuKey, dict[str, str]] = {}
    pods: dict[_GpuKey, set[str]] = defaultdict(set)
    seen: set[_GpuKey] = set()
    signature: dict[_GpuKey, float] = {}
    node_pods: dict[str, float] = {}
    for s in samples:
        if s.name == names.NODE_GPU_PODS_MAX:
            node_pods[s.labels.get("node", "")] = s.value
            continue
        if s.name == names.GPU_PROCESSES_MAX:
            continue
        key = (series.node_of(s.labels) or "", s.labels.get("UUID", ""))
        if not key[0] or not key[1]:
            continue
        facts.setdefault(key, {"gpu": s.labels.get("gpu", ""), "model": ""})
        facts[key]["model"] = facts[key]["model"] or s.labels.get("modelName", "")
        pod = pod_of(s.labels)
        if pod:
            pods[key].add(pod)
        if s.name == names.GPU_SEEN_AT_WINDOW_START:
            seen.add(key)
        elif s.name == names.PHANTOM_SIGNATURE_MINUTES:
            if not pod:
                signature[key] = max(signature.get(key, 0.0), s.value)
        else:
            values[key][s.name].append(s.value)
    return tuple(
        fleet.GpuWindow(
            node=node,
            gpu=facts[(node, uuid)]["gpu"],
            uuid=uuid,
            model=facts[(node, uuid)]["model"],
            stats={name: _combine(name, v) for name, v in values[(node, uuid)].items()},
            pods=tuple(sorted(pods[(node, uuid)])),
            node_gpu_pods=node_pods.get(node),
            seen_at_start=(node, uuid) in seen,
            signature_minutes=signature.get((node, uuid)),
        )
        for node, uuid in sorted(facts)
    )


def processes_from_samples(samples: Iterable[fleet.MetricSample]) -> dict[str, int] | None:
    """GPU UUID -> the most processes the agent saw on it in the window; None when no agent
    reported any (the pod join alone decides). An agent whose scan ran out of budget reports
    only the GPUs it saw held, so a GPU missing here was not vouched for as empty."""
    found = [s for s in samples if s.name == names.GPU_PROCESSES_MAX and s.labels.get("uuid")]
    if not found:
        return None
    counts: dict[str, int] = {}
    for s in found:
        counts[s.labels["uuid"]] = max(counts.get(s.labels["uuid"], 0), int(s.value))
    return counts


def _combine(name: str, values: list[float]) -> float:
    stat = name.rsplit(" ", 1)[-1]
    if stat == "min":
        return min(values)
    if stat == "avg":
        return fmean(values)
    return max(values)
