"""The figures a demo run is judged by: who was isolated and how fast, false isolations,
misses, GPU-hours out of service, and one merged timeline (world events and guard actions)."""

from __future__ import annotations

from typing import Any

from gpuguard.demo import harness


def scenario_report(run: harness.ScenarioRun) -> dict[str, Any]:
    spec = run.spec
    isolated = [name for name in spec.node_names if name in run.isolated_at]
    return {
        "name": spec.name,
        "description": spec.description,
        "nodes": list(spec.node_names),
        "isolated": isolated,
        "time_to_isolate_s": _time_to_isolate(run),
        "time_to_isolate_gpu_s": _time_to_isolate_gpu(run),
        "false_isolations": [n for n in isolated if n in spec.expect.never_isolate],
        "missed": [n for n in spec.expect.isolate if n not in run.isolated_at]
        + [g for g in spec.expect.isolate_gpus if g not in run.gpu_isolated_at],
        "gpu_hours_out": round(run.gpu_seconds_out / 3600, 2),
        "healthy_gpu_hours_out": round(run.healthy_gpu_seconds_out / 3600, 2),
        "gpu_isolated": run.gpu_isolated,
        "guard_ticks": run.ticks,
        "verdicts": run.verdicts,
        "returned": [n for n in spec.node_names if n in run.returned_at],
        "held": dict(run.held),
        "time_to_return_s": _time_to_return(run),
        "ledger": run.ledger,
        "cards": run.cards,
        "withheld": run.withheld,
        "breaker": {"trips": run.trips},
        "findings": run.findings,
        "rollouts": run.rollouts,
        "timeline": timeline(run),
    }


def _time_to_isolate(run: harness.ScenarioRun) -> dict[str, float]:
    out = {}
    for name, when in run.isolated_at.items():
        first = run.played.first_fault_at(name)
        if first is not None:
            out[name] = ((when - run.played.origin) - first).total_seconds()
    return out


def _time_to_isolate_gpu(run: harness.ScenarioRun) -> dict[str, float]:
    """Seconds from the node's first fault to each GPU isolation (``node/index``)."""
    out = {}
    for ref, when in run.gpu_isolated_at.items():
        first = run.played.first_fault_at(ref.split("/")[0])
        if first is not None:
            out[ref] = ((when - run.played.origin) - first).total_seconds()
    return out


def _time_to_return(run: harness.ScenarioRun) -> dict[str, list[float]]:
    """Seconds from the repair (power cycle, reboot, GPU reset) before each return to it."""
    repairs = [e for e in run.played.timeline if e.kind in _REPAIRS]
    out: dict[str, list[float]] = {}
    for node, returns in run.returned_at.items():
        for when in returns:
            t = (when - run.played.origin).total_seconds()
            before = [e.t for e in repairs if e.node == node and e.t <= t]
            if before:
                out.setdefault(node, []).append(t - max(before))
    return out


_REPAIRS = {"power_cycle", "reboot", "gpu_reset"}


def timeline(run: harness.ScenarioRun) -> list[dict[str, Any]]:
    world_entries = [
        {"t": e.t, "kind": e.kind, "node": e.node, "reason": None, "detail": e.detail}
        for e in run.played.timeline
    ]
    merged = world_entries + run.guard_timeline
    return sorted(merged, key=lambda e: (e["t"], e["kind"] not in _WORLD_FIRST))


_WORLD_FIRST = {"xid", "gpu_lost", "dbe"}


def totals(reports: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "scenarios": len(reports),
        "false_isolations": sum(len(r["false_isolations"]) for r in reports),
        "missed": sum(len(r["missed"]) for r in reports),
        "phantom_gpus": sum(1 for r in reports for f in r["findings"] if "wasted_w" in f),
        "phantom_wasted_w": round(
            sum(f.get("wasted_w", 0.0) for r in reports for f in r["findings"]), 1
        ),
        "fleet_health_findings": sum(
            1 for r in reports for f in r["findings"] if "wasted_w" not in f
        ),
        # fault's first kernel line -> cordon accepted, the slowest node isolation of the run
        "time_to_isolate_max_s": max(
            (s for r in reports for s in r["time_to_isolate_s"].values()), default=None
        ),
    }
