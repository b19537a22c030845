"""Findings the demo reports beside isolations: phantom GPUs standing at a scenario's end.

Phantom utilization is waste, not a fault (the phantom incident [docs/design.md#incidents]): the
guard never cordons for it, so a scenario's score would show nothing. The demo asks the world's
Prometheus view for the GPU window plan (``sources.gpu_metrics``) at the scenario's last instant and
runs the phantom policy on it, reporting each phantom GPU with its wasted watts. GPUs that were
phantom and cleared earlier (a new workload) are not listed: the list is what an operator would see
now.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gpuguard.catalog import gpu_models
from gpuguard.model import settings as settings_model
from gpuguard.policy import phantom
from gpuguard.sim import prometheus_view
from gpuguard.sources import gpu_metrics


def phantom_findings(
    view: prometheus_view.WorldPrometheus,
    settings: settings_model.PhantomSettings,
    at: datetime,
) -> list[dict[str, Any]]:
    """The phantom GPUs at ``at`` as ``{"kind", "node", "gpu", ...}`` dicts."""
    samples = view.gpu_window_samples(
        at,
        settings.hold,
        signature_lookback=settings.age_lookback,
        util_min_pct=settings.util_min_pct,
        fb_used_max_mib=settings.fb_used_max_mib,
    )
    windows = gpu_metrics.windows_from_samples(samples)
    decision = phantom.decide(windows, settings, gpu_models.load_table(), at)
    return [as_dict(p) for p in decision.phantoms]


def as_dict(p: phantom.PhantomGpu) -> dict[str, Any]:
    return {
        "kind": p.finding.kind,
        "node": p.node,
        "gpu": p.gpu,
        "uuid": p.uuid,
        "reason": str(p.finding.reason),
        "power_w": round(p.power_w, 1),
        "wasted_w": round(p.wasted_w, 1),
        "gpu_hours": round(p.hours, 2),
        "detail": p.finding.detail,
    }
