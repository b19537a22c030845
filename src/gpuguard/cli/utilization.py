"""``gpuguard utilization``: what GPUs held by pods really do — util is not efficiency.

Reads per-GPU telemetry over a window from Prometheus (``sources.gpu_metrics``), now or at a
past instant, and classifies each GPU a pod holds (``policy.utilization``).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpuguard.cli import guard, inputs, output
from gpuguard.cli import phantom as phantom_cli
from gpuguard.model import durations
from gpuguard.policy import utilization as utilization_policy


def utilization(
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", "-n", parser=inputs.namespace,
                     help="Only pods of this namespace."),
    ] = None,
    since: phantom_cli.SinceOpt = None,
    prometheus_url: phantom_cli.UrlOpt = None,
    at: phantom_cli.AtOpt = "now",
    config: guard.ConfigOpt = None,
    fmt: guard.FormatOpt = output.Format.TABLE,
) -> None:
    """Explain what busy GPUs really do over a window (default 1 h), for every GPU a pod
    holds (dcgm-exporter's pod mapping): healthy-busy, tensor-idle (util high, tensor cores
    idle: precision or shapes), memory-bound (DRAM high, tensor low), low-occupancy,
    lightly-used, idle-expensive (allocated, ~0 % for the window: cost). Without DCGM
    profiling metrics the answer is "profiling-metrics-missing", never a guess from util.

    Examples:

      gpuguard utilization --prometheus-url http://prometheus:9090

      gpuguard utilization -n ml-training --since 6h -o json

      gpuguard utilization --at now-1d
    """
    settings = guard.load_settings(config)
    default_window = settings.utilization.window
    query = phantom_cli.parse_query(settings, prometheus_url, since, default_window, at)
    windows = phantom_cli.fetch_windows(query, settings)
    found = utilization_policy.diagnose(windows, settings.utilization, query.window)
    if namespace:
        found = tuple(d for d in found if any(p.startswith(f"{namespace}/") for p in d.pods))
    data = as_data(found, query)
    if not output.emit(data, fmt):
        _print(found, query)


def as_data(
    found: tuple[utilization_policy.Diagnosis, ...], query: phantom_cli.Query
) -> dict[str, Any]:
    return {
        "at": query.at.isoformat(),
        "window": durations.format_duration(query.window),
        "gpus": [
            {
                "node": d.node,
                "gpu": d.gpu,
                "pods": list(d.pods),
                "class": str(d.reason),
                "util_pct": d.util_avg,
                "sm_active": d.sm_active,
                "sm_occupancy": d.sm_occupancy,
                "tensor_active": d.tensor_active,
                "dram_active": d.dram_active,
                "hint": d.hint,
            }
            for d in found
        ],
    }


def _print(found: tuple[utilization_policy.Diagnosis, ...], query: phantom_cli.Query) -> None:
    rows = [
        [d.node, d.gpu, ", ".join(d.pods), str(d.reason), _pct(d.util_avg, 1), _pct(d.sm_active),
         _pct(d.sm_occupancy), _pct(d.tensor_active), _pct(d.dram_active), d.hint]
        for d in found
    ]  # fmt: skip
    window = durations.format_duration(query.window)
    output.table(
        f"GPUs held by pods, averages over {window} to {query.at:%Y-%m-%d %H:%M:%S}Z",
        ["node", "gpu", "pods", "class", "util", "SM", "occupancy", "tensor", "DRAM", "hint"],
        rows,
    )


def _pct(value: float | None, scale: float = 100.0) -> str:
    """A ratio (or a percentage with ``scale`` 1) as "42 %"; "-" when not collected."""
    return "-" if value is None else f"{value * scale:.0f} %"
