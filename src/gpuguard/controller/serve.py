"""``gpuguard run``'s composition: the guard, its Lease, the loop and /metrics, until a signal.

The CLI only parses flags and settings (``cli.run``); this module builds the guard with the
real adapters (``wiring.build_guard``), the leader election over a Lease, the runner that
ticks while leading, the watch caches' wakes (``fast_path``) and the /metrics and /healthz
server, and runs them until SIGTERM or SIGINT, when the loop stops and the Lease is released.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import signal
import threading
from dataclasses import dataclass
from datetime import UTC, datetime

from gpuguard.controller import fast_path, leader, runner, telemetry, wiring
from gpuguard.model import settings as settings_model


@dataclass(frozen=True)
class Serving:
    """Who this replica is, where /metrics listens, and whether it only decides and logs."""

    identity: str
    port: int
    dry_run: bool = False


def serve(
    settings: settings_model.GuardSettings, conn: wiring.Connection, serving: Serving
) -> None:
    """Run the guard until SIGTERM or SIGINT (``gpuguard run``)."""
    c = settings.controller
    fast = fast_path.FastPath()
    with (
        wiring.build_guard(settings, conn, dry_run=serving.dry_run, fast=fast) as (built, client),
        contextlib.closing(wiring.freshness_reader(settings, conn)) as fresh,
    ):
        elector = leader.LeaseElector(
            leader.KubeLeases(client, c.lease_name, c.namespace),
            identity=serving.identity,
            lease_duration=c.lease_duration,
            renew_deadline=c.renew_deadline,
            retry_period=c.renew_every,
        )
        metrics = telemetry.GuardMetrics()
        loop = runner.Runner(
            dataclasses.replace(built, is_leader=runner.WriteGate(elector, metrics)),
            elector,
            metrics,
            interval=c.interval,
            retry=c.renew_every,
            probe=lambda: fresh.samples(datetime.now(UTC)),
        )
        stop = threading.Event()

        def stopping(*_: object) -> None:
            stop.set()
            loop.interrupt()

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, stopping)
        with telemetry.serve(
            loop.metrics, loop.healthy, port=serving.port, ready=loop.ready
        ) as server, fast_path.watching(
            built.cluster, fast, loop.wake, metrics, c.interval, stop
        ):
            logging.info(
                "gpuguard %s serving /metrics on :%d", serving.identity, server.server_address[1]
            )
            loop.run(stop)
