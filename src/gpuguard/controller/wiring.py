"""Builds a Guard from settings with the real adapters: lightkube for the cluster, httpx for
Prometheus, the packaged Xid catalog with the cluster's overrides."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar

from lightkube import Client, ConfigError, KubeConfig
from lightkube.config.models import Cluster, User

from gpuguard.actuators import (
    dra,
    eviction,
    jobs,
    ledger,
    nodes,
    notify,
    redfish,
    workload_events,
)
from gpuguard.catalog import xid as xid_catalog
from gpuguard.clients import kube
from gpuguard.controller import change as change_step
from gpuguard.controller import (
    dra_taints,
    fast_path,
    fault_history,
    fitness_label,
    fleet_health,
    gpu_isolation,
    phantom_watch,
    recovery,
    remediation,
    return_to_pool,
    tick,
    tick_ledger,
)
from gpuguard.controller import topology_cache as topology_step
from gpuguard.errors import InputError
from gpuguard.model import annotation_keys, ports
from gpuguard.model import settings as settings_model
from gpuguard.policy import escalation, gang, gpu_route
from gpuguard.sources import (
    changes,
    gang_pods,
    gpu_metrics,
    gpu_pods,
    kubernetes,
    node_scope,
    prometheus,
    reset_cards,
    return_facts,
    watched_cluster,
)
from gpuguard.sources import fleet_health as health_plan


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


@dataclass(frozen=True)
class Connection:
    """Where the cluster and Prometheus are: flags override settings."""

    kubeconfig: Path | None = None
    kube_server: str | None = None
    prometheus_url: str | None = None


def kube_client(connection: Connection) -> Client:
    """A lightkube client for the cluster the flags name; InputError (naming the flag or file)
    when there is no usable configuration."""
    try:
        if connection.kube_server:
            config: KubeConfig | None = KubeConfig.from_one(
                cluster=Cluster(server=connection.kube_server), user=User()
            )
        elif connection.kubeconfig:
            config = KubeConfig.from_file(connection.kubeconfig)
        else:
            config = None  # in-cluster, or $KUBECONFIG / ~/.kube/config
        return kube.client(config, annotation_keys.FIELD_MANAGER)
    except ConfigError as e:
        where = f"--kubeconfig {connection.kubeconfig}" if connection.kubeconfig else (
            "no cluster configured (not in a pod, $KUBECONFIG unset, ~/.kube/config missing)"
        )
        raise InputError(f"{where}: {e}; pass --kubeconfig FILE or --kube-server URL") from e
    except OSError as e:
        raise InputError(f"--kubeconfig {connection.kubeconfig}: {e.strerror or e}") from e
    except (ValueError, TypeError, AttributeError) as e:
        raise InputError(f"--kubeconfig {connection.kubeconfig}: not a kubeconfig ({e})") from e


def kubeconfig_user(kubeconfig: Path | None) -> str | None:
    """The user of the kubeconfig's current context (who a person is, for audit lines); None
    when there is no readable kubeconfig."""
    try:
        config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_env()
        single = config.get()
    except (ConfigError, OSError, ValueError):
        return None
    return single.context.user if single is not None else None


@contextmanager
def build_guard(
    guard_settings: settings_model.GuardSettings,
    connection: Connection,
    *,
    dry_run: bool,
    fast: fast_path.FastPath | None = None,
) -> Iterator[tuple[tick.Guard, Client]]:
    """The guard with every step wired to the real adapters; all of them closed on exit.
    It reads the cluster as ``cluster_reads`` says (watch caches with ``fast``)."""
    with ExitStack() as closing:
        client = kube_client(connection)
        closing.callback(client.close)
        url = connection.prometheus_url or guard_settings.prometheus.url
        read = _prometheus_reader(url, guard_settings, closing)
        notifier = _notifier(guard_settings, closing)
        reads = cluster_reads(client, guard_settings, fast)
        if isinstance(reads.cluster, watched_cluster.WatchedCluster):
            closing.callback(reads.cluster.stop)
        cluster, writer = reads.cluster, reads.writer
        catalog = xid_catalog.load_catalog(guard_settings.controller.xid_overrides)
        c = guard_settings.controller
        isolation = guard_settings.isolation
        metrics = read(prometheus.QueryPlan(isolation.hold_window, isolation.xid_lookback))
        fault_ledger = shared_ledger(client, c.namespace)
        guard = tick.Guard(
            metrics=metrics,
            pods_on_gpus=gpu_pods.source(metrics),
            cluster=cluster,
            writer=writer,
            classifier=catalog,
            settings=guard_settings,
            clock=SystemClock(),
            dry_run=dry_run,
            notifier=notifier,
            ledger=fault_ledger,
            recovery=recovery.Recovery(
                jobs=jobs.Jobs(client, c.namespace),
                ledger=fault_ledger,
                writer=writer,
                catalog=catalog,
                image=c.image,
                namespace=c.namespace,
                notifier=notifier,
                runtime_class=c.job_runtime_class,
                merge_window=escalation.merge_window_for(isolation.hold_window),
                evidence_deadline=c.evidence_deadline,
                lookback=isolation.xid_lookback,
            )
            if c.recovery
            else None,
            return_to_pool=return_to_pool.ReturnToPool(
                jobs=jobs.Jobs(client, c.namespace),
                ledger=fault_ledger,
                writer=writer,
                facts=return_facts.ReturnFactsSource(read(return_facts.ReturnFactsPlan())),
                classifier=catalog,
                settings=guard_settings,
                image=c.image,
                namespace=c.namespace,
                notifier=notifier,
                await_verdict=c.recovery,
            ),
            phantom=phantom_watch.PhantomWatch(
                _gpu_windows(url, guard_settings, closing), guard_settings.phantom
            ),
            history=fault_history.FaultHistory(
                fault_ledger,
                catalog,
                isolation.xid_lookback,
                writer,
                merge_window=escalation.merge_window_for(isolation.hold_window),
            ),
            gpu_isolation=gpu_isolation_step(
                client, writer, catalog, guard_settings, namespace=c.namespace,
                fault_ledger=fault_ledger,
            ),
            changes=change_step.Changes(
                source=changes.ChangeReader(client, c.namespace),
                writer=writer,
                checks=read(changes.ConformancePlan()),
                jobs=jobs.Jobs(client, c.namespace),
                image=c.image,
                kured=changes.KuredLock(client),
                notifier=notifier,
                namespace=c.namespace,
                runtime_class=c.job_runtime_class,
                templates=changes.JobTemplates(client, c.change_templates),
                evictions=eviction.Evictor(client),
                limits=guard_settings.changes,
                burnin_deadline=guard_settings.return_to_pool.burnin_deadline,
            ),
            fitness_label=fitness_label.FitnessLabel(writer) if guard_settings.health.label
            else None,
            remediation=remediation_step(client, writer, guard_settings, notifier,
                                         read=read, fault_ledger=fault_ledger),
            fleet_health=fleet_health.FleetHealthWatch(
                pods=reads.workload_pods,
                metrics=read(
                    health_plan.HealthQueryPlan.for_settings(guard_settings.fleet, topology=False)
                ),
                settings=guard_settings.fleet,
                events=workload_events.WorkloadEvents(client),
                topologies=topology_cache(read, guard_settings.fleet),
            ),
        )
        yield guard, client


def shared_ledger(client: Client, namespace: str) -> tick_ledger.TickLedger:
    """The one fault ledger every step of a guard shares (read once a tick); its reads move
    malformed lines aside (``ledger.Ledger(quarantine=True)``)."""
    return tick_ledger.TickLedger(ledger.Ledger(client, namespace, quarantine=True))


def topology_cache(
    read: Callable[[prometheus.Plan], prometheus.PrometheusSource],
    fleet_settings: settings_model.FleetHealthSettings,
) -> topology_step.TopologyCache:
    """The agent's topology, read apart from the fleet-health plan and kept between runs."""
    reader, changes = read(health_plan.TopologyPlan()), health_plan.TopologyChangesPlan()
    return topology_step.TopologyCache(
        reader,
        node_scope.ScopedSource(reader, health_plan.TopologyPlan),
        fleet_settings.topology_refresh,
        changes=read(changes),
        changes_cover=changes.since,
    )


@dataclass(frozen=True)
class ClusterReads:
    """How a guard reads the cluster and writes its Nodes: the tick's reader, the one node
    writer (over watch caches, reporting each write for read-your-writes) and the gang
    check's pods."""

    cluster: kubernetes.KubernetesReader | watched_cluster.WatchedCluster
    writer: nodes.NodeWriter
    workload_pods: fleet_health.PodSource


def cluster_reads(
    client: Client, guard_settings: settings_model.GuardSettings, fast: fast_path.FastPath | None
) -> ClusterReads:
    """With ``fast`` (a long-running guard: ``gpuguard run``, the demo) and
    ``controller.watch`` on, watch caches (not started: ``fast_path.watching`` runs them)
    whose Node changes go to ``fast``; otherwise every tick lists."""
    c = guard_settings.controller
    if fast is None or not c.watch:
        return ClusterReads(
            kubernetes.KubernetesReader(client),
            nodes.NodeWriter(client),
            gang_pods.GangPodReader(client),
        )
    # a cache whose watch is broken longer than a tick interval is not decided on
    cluster = watched_cluster.watched_cluster(
        client, c.interval, on_node_change=fast.on_node_change, pod_annotations=GANG_ANNOTATIONS
    )
    # each write the writer makes is one the next read of the Nodes waits for
    writer = nodes.NodeWriter(client, on_written=cluster.node_written)
    return ClusterReads(cluster, writer, watched_cluster.WorkloadPods(cluster))


GANG_ANNOTATIONS = frozenset(
    {m.key for m in gang.MARKERS if m.where == "annotation"} | {gang.KUEUE_TOTAL_COUNT}
)  # the only pod annotations the gang check reads


def remediation_step(
    client: Client,
    writer: nodes.NodeWriter,
    guard_settings: settings_model.GuardSettings,
    notifier: ports.Notifier | None,
    *,
    read: Callable[[prometheus.Plan], prometheus.PrometheusSource] | None = None,
    fault_ledger: ports.LedgerWriter,
) -> remediation.Remediation | None:
    """The opt-in repairs (docs/remediation.md): None while no pool is opted in. The BMC's
    Secrets are read from the controller's namespace, by name, when a power cycle is due; the
    GPU reset's card facts from Prometheus (``read``; None: unknown, no reset)."""
    r, c = guard_settings.remediation, guard_settings.controller
    if not r.power_cycle_pools and not r.hand_off_pools and not r.gpu_reset_pools:
        return None
    resets = bool(r.gpu_reset_pools)
    power = redfish.RedfishPower(
        redfish.secret_reader(client, guard_settings.controller.namespace), r.bmc_secrets,
        timeout_s=r.bmc_timeout.total_seconds(),
    )  # fmt: skip
    return remediation.Remediation(
        power, eviction.Evictor(client), writer, r, hand_off=writer, notifier=notifier,
        ledger=fault_ledger,
        reset_jobs=jobs.Jobs(client, c.namespace) if resets else None,
        reset_job=remediation.ResetJob(c.image, c.namespace, c.job_runtime_class or None),
        cards=reset_cards.ResetCards(reset_cards.scoped(read(prometheus.FreshnessPlan())))
        if resets and read is not None else None,
    )


def gpu_isolation_step(
    client: Client,
    writer: nodes.NodeWriter,
    catalog: xid_catalog.XidCatalog,
    guard_settings: settings_model.GuardSettings,
    *,
    namespace: str,
    fault_ledger: ports.LedgerPort[ledger.LedgerRead],
) -> gpu_isolation.GpuIsolation:
    """The GPU-isolation step over the API (the controller's and the demo's guard alike)."""
    c, gpus = guard_settings.controller, guard_settings.gpu_isolation
    return gpu_isolation.GpuIsolation(
        jobs=jobs.Jobs(client, namespace),
        ledger=fault_ledger,
        writer=writer,
        marker=writer,
        catalog=catalog,
        rma_deadline=gpus.rma_deadline,
        dra=dra_taints.DraTaints(
            dra.DeviceTaints(client), writer, gpu_route.Effect(gpus.dra_taint_effect)
        ),
        evictor=eviction.Evictor(client) if gpus.evict_pods else None,
        image=c.image,
        namespace=namespace,
        runtime_class=c.job_runtime_class,
        xid_overrides=c.xid_overrides is not None,
        burnin_deadline=guard_settings.return_to_pool.burnin_deadline,
    )


def _prometheus_reader(
    url: str, guard_settings: settings_model.GuardSettings, closing: ExitStack
) -> Callable[[prometheus.Plan], prometheus.PrometheusSource]:
    def read(plan: prometheus.Plan) -> prometheus.PrometheusSource:
        return closed_on_exit(
            prometheus.PrometheusSource(url, plan, **_prometheus_options(guard_settings)), closing
        )

    return read


def freshness_reader(
    guard_settings: settings_model.GuardSettings, connection: Connection
) -> prometheus.PrometheusSource:
    """A reader of only the freshness series (close it): a standby's readiness probe —
    does Prometheus answer with fresh data, so that it could take over and decide?"""
    url = connection.prometheus_url or guard_settings.prometheus.url
    return prometheus.PrometheusSource(
        url, prometheus.FreshnessPlan(), **_prometheus_options(guard_settings)
    )


def _prometheus_options(guard_settings: settings_model.GuardSettings) -> dict[str, Any]:
    """What every Prometheus reader takes from the settings: staleness bound and timeout."""
    return {
        "staleness": guard_settings.prometheus.staleness,
        "timeout_s": guard_settings.prometheus.timeout.total_seconds(),
        "scopes": guard_settings.prometheus.scrape_scope,
    }


class _HasClose(Protocol):
    def close(self) -> None: ...


_Closable = TypeVar("_Closable", bound=_HasClose)


def closed_on_exit(source: _Closable, closing: ExitStack) -> _Closable:
    """``source``, closed when ``closing`` unwinds."""
    closing.callback(source.close)
    return source


def _gpu_windows(
    url: str, guard_settings: settings_model.GuardSettings, closing: ExitStack
) -> gpu_metrics.GpuMetricsSource:
    plan = gpu_metrics.GpuQueryPlan.for_settings(guard_settings.phantom)
    return closed_on_exit(
        gpu_metrics.GpuMetricsSource(url, plan, **_prometheus_options(guard_settings)), closing
    )


def _notifier(
    guard_settings: settings_model.GuardSettings, closing: ExitStack
) -> notify.WebhookNotifier | None:
    notes = guard_settings.notifications
    if not notes.webhook_url:
        return None
    notifier = notify.WebhookNotifier(
        notes.webhook_url,
        notify.NotifyFormat(notes.format),
        timeout_s=notes.timeout.total_seconds(),
    )
    closing.callback(notifier.close)
    return notifier
