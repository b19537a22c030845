"""``gpuguard run``: the controller — leader election, a tick every interval, /metrics."""

from __future__ import annotations

import logging
import os
import socket
from enum import StrEnum
from typing import Annotated

import typer

from gpuguard.cli import failures, guard
from gpuguard.controller import serve


class LogLevel(StrEnum):
    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"


def run(
    config: guard.ConfigOpt = None,
    kubeconfig: guard.KubeconfigOpt = None,
    kube_server: guard.ServerOpt = None,
    prometheus_url: guard.PromOpt = None,
    identity: Annotated[
        str | None, typer.Option(help="Unique replica name for the Lease (default: $POD_NAME).")
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(min=0, max=65535, help="Port for /metrics and /healthz (0 = any free port)."),
    ] = None,
    dry_run: Annotated[bool, typer.Option(help="Decide and log; change nothing.")] = False,
    log_level: Annotated[LogLevel, typer.Option(help="How much to log.")] = LogLevel.INFO,
) -> None:
    """Run the guard: hold the Lease (one replica acts, the others stand by), tick every
    interval while leading, serve /metrics and /healthz, release the Lease on SIGTERM.

    Example: gpuguard run --config /etc/gpuguard/settings.yaml
    """
    logging.basicConfig(level=log_level.value, format="%(asctime)s %(levelname)s %(message)s")
    for chatty in ("httpx", "httpx2"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    settings = guard.load_settings(config)
    me = identity or os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    conn = guard.connection(kubeconfig, kube_server, prometheus_url)
    port = settings.controller.metrics_port if metrics_port is None else metrics_port
    serving = serve.Serving(identity=me, port=port, dry_run=dry_run)
    with failures.listening("--metrics-port", port):
        serve.serve(settings, conn, serving)
