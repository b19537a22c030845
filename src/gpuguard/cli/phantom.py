"""``gpuguard phantom``: GPUs that look 100 % busy while doing nothing, and what they cost.

Reads per-GPU telemetry over a window from Prometheus (``sources.gpu_metrics``), now or at a
past instant (``--at``), and runs the phantom policy (``policy.phantom``). Reports only; it
changes nothing in the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer

from gpuguard.catalog import gpu_models
from gpuguard.cli import backtest, guard, inputs, output
from gpuguard.errors import SourceError
from gpuguard.model import durations, fleet
from gpuguard.model import settings as settings_model
from gpuguard.policy import phantom as phantom_policy
from gpuguard.sources import gpu_metrics

SinceOpt = Annotated[
    timedelta | None,
    typer.Option("--since", parser=inputs.duration(), metavar=inputs.DURATION,
                 help="Window the signature must hold over (default: settings)."),
]
AtOpt = Annotated[
    str, typer.Option("--at", help="Evaluate at this instant: ISO time, now, or now-2h.")
]
UrlOpt = Annotated[
    str | None,
    typer.Option("--prometheus-url", help="Prometheus base URL (default: settings)."),
]


@dataclass(frozen=True, slots=True)
class Query:
    """What to read: where, over which window, at which instant."""

    url: str
    window: timedelta
    at: datetime


def parse_query(
    settings: settings_model.GuardSettings,
    url: str | None,
    since: timedelta | None,
    default_window: timedelta,
    at: str,
) -> Query:
    """The validated flags; exit 2 with the flag named when one is malformed."""
    window = since or default_window
    instant = backtest.parse_instant(at, datetime.now(UTC), flag="--at")
    if url is not None:
        guard.check_url(url, "--prometheus-url")
    return Query(url or settings.prometheus.url, window, instant)


def fetch_windows(
    query: Query, settings: settings_model.GuardSettings
) -> tuple[fleet.GpuWindow, ...]:
    """Every GPU's window from Prometheus; exit 1 with the reason when it cannot answer."""
    return fetch_readings(query, settings).windows


def fetch_readings(query: Query, settings: settings_model.GuardSettings) -> gpu_metrics.GpuReadings:
    """Every GPU's window and the agent's process counts from Prometheus; exit 1 with the
    reason when it cannot answer."""
    plan = gpu_metrics.GpuQueryPlan(
        window=query.window,
        signature_lookback=settings.phantom.age_lookback,
        util_min_pct=settings.phantom.util_min_pct,
        fb_used_max_mib=settings.phantom.fb_used_max_mib,
    )
    staleness = settings.prometheus.staleness
    timeout = settings.prometheus.timeout.total_seconds()
    try:
        with gpu_metrics.GpuMetricsSource(
            query.url, plan, staleness=staleness, timeout_s=timeout,
            scopes=settings.prometheus.scrape_scope,
        ) as source:
            return source.readings(query.at)
    except SourceError as e:
        raise SourceError(f"Prometheus {query.url}: {e}") from e


def phantom(
    since: SinceOpt = None,
    prometheus_url: UrlOpt = None,
    at: AtOpt = "now",
    config: guard.ConfigOpt = None,
    fmt: guard.FormatOpt = output.Format.TABLE,
) -> None:
    """Find GPUs that pretend to work: SM (or util) ~100 %, DRAM idle, framebuffer empty,
    P0 / max clocks, power well above idle — with no pod and no process on them, held over
    the window (default 15 min). Shows the watts each wastes over its model's idle power, the
    GPU-hours so far, the evidence to take before any reboot, and how to recover.

    A small compute-bound job looks the same on every metric but has a pod,
    so it is never reported. Nothing in the cluster is changed.

    Examples:

      gpuguard phantom --prometheus-url http://prometheus:9090

      gpuguard phantom --since 1h -o json

      gpuguard phantom --at 2026-04-21T05:00:00Z   (as it was then)
    """
    settings = guard.load_settings(config)
    query = parse_query(settings, prometheus_url, since, settings.phantom.hold, at)
    hold = settings.phantom.model_copy(update={"hold": query.window})
    read = fetch_readings(query, settings)
    models = gpu_models.load_table()
    decision = phantom_policy.decide(read.windows, hold, models, query.at, read.processes)
    data = as_data(decision, query)
    if not output.emit(data, fmt):
        _print(decision, query)


def as_data(decision: phantom_policy.PhantomDecision, query: Query) -> dict[str, Any]:
    return {
        "at": query.at.isoformat(),
        "window": durations.format_duration(query.window),
        "phantom_gpus": len(decision.phantoms),
        "total_power_w": round(sum(p.power_w for p in decision.phantoms), 1),
        "total_wasted_w": round(decision.wasted_w, 1),
        "phantoms": [_phantom_data(p) for p in decision.phantoms],
        "advice": list(phantom_policy.ADVICE),
    }


def _phantom_data(p: phantom_policy.PhantomGpu) -> dict[str, Any]:
    return {
        "node": p.node,
        "gpu": p.gpu,
        "uuid": p.uuid,
        "model": p.model,
        "power_w": round(p.power_w, 1),
        "idle_power_w": p.idle_power_w,
        "idle_power_known": p.idle_power_known,
        "wasted_w": round(p.wasted_w, 1),
        "gpu_hours": round(p.hours, 2),
        "wasted_kwh": round(p.wasted_kwh, 3),
        "signature": "profiling" if p.profiled else "util (no profiling metrics)",
        "detail": p.finding.detail,
        "evidence": [e.describe() for e in p.finding.evidence],
        "commands": [
            {"run_on": c.run_on, "command": c.command, "shows": c.shows} for c in p.commands
        ],
    }


def _print(decision: phantom_policy.PhantomDecision, query: Query) -> None:
    rows = [
        [p.node, p.gpu, p.model, f"{p.power_w:.0f}", f"{p.wasted_w:.0f}", f"{p.hours:.2f}",
         "profiling" if p.profiled else "util only"]
        for p in decision.phantoms
    ]  # fmt: skip
    window = durations.format_duration(query.window)
    output.table(
        f"phantom GPUs at {query.at:%Y-%m-%d %H:%M:%S}Z (held {window}): {len(rows)}",
        ["node", "gpu", "model", "power W", "wasted W", "GPU-hours", "signature"],
        rows,
    )
    if not decision.phantoms:
        return
    output.console.print(f"wasted over idle: ~{decision.wasted_w:.0f} W in total")
    for p in decision.phantoms:
        output.console.print(
            "\n", output.bold(f"evidence for {p.node} GPU {p.gpu}"), " (before reboot):", sep=""
        )
        for c in p.commands:
            output.console.print(f"  [{c.run_on}] {c.command}")
    output.console.print("\n", output.bold("what to do"), sep="")
    for line in phantom_policy.ADVICE:
        output.console.print(f"  - {line}")
