"""Builds a Guard from settings with the real adapters: lightkube for the cluster, httpx for
Prometheus, the packaged Xid catalog with the cluster's overrides."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from lightkube import Client, KubeConfig
from lightkube.config.models import Cluster, User

from gpuguard.actuators import jobs, ledger, nodes, notify
from gpuguard.catalog import xid as xid_catalog
from gpuguard.controller import recovery, restore, tick
from gpuguard.model import settings as settings_model
from gpuguard.sources import kubernetes, prometheus, return_facts


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
    if connection.kube_server:
        config: KubeConfig | None = KubeConfig.from_one(
            cluster=Cluster(server=connection.kube_server), user=User()
        )
    elif connection.kubeconfig:
        config = KubeConfig.from_file(connection.kubeconfig)
    else:
        config = None  # in-cluster, or $KUBECONFIG / ~/.kube/config
    return Client(config=config, field_manager="gpuguard")


@contextmanager
def build_guard(
    guard_settings: settings_model.GuardSettings, connection: Connection, *, dry_run: bool
) -> Iterator[tuple[tick.Guard, Client]]:
    client = kube_client(connection)
    plan = prometheus.QueryPlan(
        hold_window=guard_settings.isolation.hold_window,
        xid_lookback=guard_settings.isolation.xid_lookback,
    )
    source = prometheus.PrometheusSource(
        connection.prometheus_url or guard_settings.prometheus.url,
        plan,
        staleness=guard_settings.prometheus.staleness,
        timeout_s=guard_settings.prometheus.timeout.total_seconds(),
    )
    notes = guard_settings.notifications
    notifier = (
        notify.WebhookNotifier(
            notes.webhook_url,
            notify.NotifyFormat(notes.format),
            timeout_s=notes.timeout.total_seconds(),
        )
        if notes.webhook_url
        else None
    )
    writer = nodes.NodeWriter(client)
    catalog = xid_catalog.load_catalog(guard_settings.controller.xid_overrides)
    c = guard_settings.controller
    recovering = (
        recovery.Recovery(
            jobs=jobs.Jobs(client, c.namespace),
            ledger=ledger.Ledger(client, c.namespace),
            writer=writer,
            catalog=catalog,
            image=c.image,
            namespace=c.namespace,
            notifier=notifier,
        )
        if c.recovery
        else None
    )
    facts = prometheus.PrometheusSource(
        connection.prometheus_url or guard_settings.prometheus.url,
        return_facts.ReturnFactsPlan(),
        staleness=guard_settings.prometheus.staleness,
        timeout_s=guard_settings.prometheus.timeout.total_seconds(),
    )
    returning = restore.Restore(
        jobs=jobs.Jobs(client, c.namespace),
        ledger=ledger.Ledger(client, c.namespace),
        writer=writer,
        facts=facts,
        classifier=catalog,
        settings=guard_settings,
        image=c.image,
        namespace=c.namespace,
        notifier=notifier,
        await_verdict=c.recovery,
    )
    try:
        yield (
            tick.Guard(
                metrics=source,
                cluster=kubernetes.KubernetesReader(client),
                writer=writer,
                classifier=catalog,
                settings=guard_settings,
                clock=SystemClock(),
                dry_run=dry_run,
                notifier=notifier,
                recovery=recovering,
                restore=returning,
            ),
            client,
        )
    finally:
        source.close()
        facts.close()
        client.close()
        if notifier is not None:
            notifier.close()
