"""Findings the demo reports beside isolations: phantom GPUs standing at a scenario's end, and
the scheduling and interconnect findings (docs/fleet-health.md) standing then.

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

from gpuguard.agent import topology as agent_topology
from gpuguard.catalog import gpu_models
from gpuguard.demo import agents
from gpuguard.model import decisions, fleet
from gpuguard.model import settings as settings_model
from gpuguard.policy import gang, interconnect, phantom, topology
from gpuguard.sim import fleet_view, prometheus_view, world
from gpuguard.sources import fleet_health, gang_pods, gpu_metrics


def phantom_findings(
    view: prometheus_view.WorldPrometheus,
    settings: settings_model.PhantomSettings,
    at: datetime,
) -> list[dict[str, Any]]:
    """The phantom GPUs at ``at`` as ``{"kind", "node", "gpu", ...}`` dicts, from the world's
    answer to the guard's phantom plan."""
    samples = gpu_plan_samples(view, at, gpu_metrics.GpuQueryPlan.for_settings(settings))
    windows = gpu_metrics.windows_from_samples(samples)
    decision = phantom.decide(windows, settings, gpu_models.load_table(), at)
    return [as_dict(p) for p in decision.phantoms]


def gpu_plan_samples(
    view: prometheus_view.WorldPrometheus, at: datetime, plan: gpu_metrics.GpuQueryPlan,
    nodes: frozenset[str] | None = None,
) -> tuple[fleet.MetricSample, ...]:  # fmt: skip
    """The world's answer to the GPU window ``plan`` at ``at`` (of ``nodes`` only, if given)."""
    return view.gpu_window_samples(
        at, plan.window, signature_lookback=plan.signature_lookback,
        util_min_pct=plan.util_min_pct, fb_used_max_mib=plan.fb_used_max_mib,
        sm_active_min=plan.sm_active_min, scoped=plan.scoped, nodes=nodes,
    )  # fmt: skip


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


# ---- scheduling and interconnect health (docs/fleet-health.md) -------------------------------


def plan_samples(
    played: world.World, at: datetime, plan: fleet_health.HealthQueryPlan
) -> tuple[fleet.MetricSample, ...]:
    """The world's answer to the fleet-health ``plan`` at ``at``."""
    filters = fleet_view.Filters(plan.throttle_reasons, plan.throttle_min_fraction,
                                 plan.nvlink_errors_min, plan.pcie_replays_min, plan.scoped)
    return fleet_view.health_samples(played, at, plan.window, plan.long_window, filters)


def fleet_health_findings(
    played: world.World, settings: settings_model.FleetHealthSettings, at: datetime
) -> list[dict[str, Any]]:
    """Gang partial allocations, topology mismatches, throttling and interconnect errors at
    ``at``, found by the product's detectors on what the world shows: its pods (the API's
    JSON), the agent's ``nvidia-smi topo -m`` probe run on each node's simulated output, and the
    world's answer to the fleet-health plan."""
    pods = [gang_pods.workload_pod(obj) for obj in played.store.list("Pod")]
    found = [_gang_dict(d) for d in gang.detect(pods, at, grace=settings.gang_grace)]
    samples = plan_samples(played, at, fleet_health.HealthQueryPlan.for_settings(settings))
    topologies = {}
    for node in played.nodes:
        if not all(g.on_bus for g in node.gpus):
            continue  # as the agent: never nvidia-smi while a GPU is off the bus (a hung driver)
        probe = agent_topology.TopologyProbe(node.name, agents.SimNvidiaSmi(node))
        read = probe.run(at)
        if read is not None:
            topologies[node.name] = read
    found += [_dict(f) for f in topology.mismatches(topologies, fleet_health.pod_gpus(samples))]
    found += [_dict(f) for f in interconnect.detect(samples, settings)]
    return found


def _dict(f: decisions.Finding) -> dict[str, Any]:
    return {"kind": f.kind, "node": f.node, "gpu": f.gpu, "reason": str(f.reason),
            "detail": f.detail}  # fmt: skip


def _gang_dict(d: gang.GangDeadlock) -> dict[str, Any]:
    return _dict(d.finding()) | {
        "job": d.job.name,
        "namespace": d.job.namespace,
        "system": d.job.system,
        "gpus_held": d.gpus_held,
        "gpu_hours": round(d.gpu_hours, 2),
        "pods_bound": len(d.bound),
        "pods_pending": len(d.pending),
    }
