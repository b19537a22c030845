"""``gpuguard demo``: the guard against the seed's incidents and the false-positive cases,
in the built-in simulator — no cluster, no GPU, no Prometheus needed."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from gpuguard.cli import sim
from gpuguard.demo import harness, score
from gpuguard.model import settings as settings_model
from gpuguard.sim import scenario

HEADER = (
    "[bold]gpuguard demo[/bold] — the guard (default settings: 30 s tick, 10 min hold window, "
    "fast path for Xid 79) against the seed's incidents and false-positive cases, in the "
    "built-in simulator. Real code paths: the isolation policy, lightkube over HTTP to the "
    "simulator's Kubernetes API, one merge patch per isolation, an Event per decision; the "
    "evidence Job runs the real collector on the node's host tree; the return to pool "
    "checks 11 conditions and runs the burn-in."
)
QUIET_KINDS = {"workload_end", "dip_end", "boot", "prometheus_up"}


def demo(
    scenarios: Annotated[
        list[str] | None,
        typer.Option(
            "--scenario",
            metavar="FILE",
            help="A scenario file or shipped name (repeatable; default: every shipped one).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Full timelines.")] = False,
) -> None:
    """Run the guard against scenarios in the simulator and print each timeline and its
    figures: time from fault to isolation, false isolations, misses, GPU-hours out.

    Examples: gpuguard demo; gpuguard demo --scenario xid79-twice --json;
    gpuguard sim list (the shipped scenarios).
    """
    refs = scenarios or list(scenario.shipped_names())
    specs = [sim.load_or_exit(ref) for ref in refs]
    settings = settings_model.GuardSettings()
    reports = [score.scenario_report(harness.play(spec, settings)) for spec in specs]
    if as_json:
        typer.echo(json.dumps({"scenarios": reports, "totals": score.totals(reports)}, indent=2))
        return
    console = Console(width=max(Console().width, 120))  # a readable table when piped
    console.print(HEADER)
    for report in reports:
        _print_scenario(console, report, verbose)
    console.print(_summary(reports))


def _print_scenario(console: Console, report: dict[str, Any], verbose: bool) -> None:
    console.print(f"\n[bold]{report['name']}[/bold] — {report['description'].strip()}")
    table = Table("t", "kind", "node", "reason / detail")
    for entry in report["timeline"]:
        if not verbose and entry["kind"] in QUIET_KINDS:
            continue
        style = "bold red" if entry["kind"] == "isolate" else None
        why = " — ".join(x for x in (entry["reason"], entry["detail"]) if x)
        table.add_row(
            sim.offset_text(entry["t"]), entry["kind"], entry["node"] or "-", why, style=style
        )
    console.print(table)
    console.print(_figures(report))


def _figures(report: dict[str, Any]) -> str:
    """The scenario's figures in words, under its timeline."""
    parts = [
        f"{node} isolated {sim.offset_text(seconds)} after the fault"
        for node, seconds in report["time_to_isolate_s"].items()
    ]
    parts += [f"{node} verdicts: {', '.join(v)}" for node, v in report["verdicts"].items()]
    parts += [
        f"{node} returned {', '.join(sim.offset_text(x) for x in seconds)} after the repair"
        for node, seconds in report["time_to_return_s"].items()
    ]
    parts += [f"{node} still isolated, {why}" for node, why in report["held"].items()]
    phantoms = report.get("findings", [])
    if phantoms:
        wasted = sum(f.get("wasted_w", 0.0) for f in phantoms)
        parts.append(
            f"{len(phantoms)} phantom GPUs wasting ~{wasted:.0f} W (reported, not cordoned)"
        )
    parts += [
        f"GPU {g['gpu']} of {g['node']} isolated ({g['mechanism']}), the node serving"
        for g in report.get("gpu_isolated", [])
    ]
    parts.append(
        f"false isolations {len(report['false_isolations'])}, missed {len(report['missed'])},"
        f" GPU-hours out {report['gpu_hours_out']:g}"
        f" (healthy {report.get('healthy_gpu_hours_out', 0):g})"
    )
    return "[bold]figures:[/bold] " + "; ".join(parts)


def _summary(reports: list[dict[str, Any]]) -> Table:
    table = Table(title="figures (the seed's guard isolated an Xid 79 after 12m26s)")
    table.add_column("scenario", no_wrap=True)
    for header in ("isolated", "→ isolation", "returned", "held", "phantom", "false", "missed"):
        table.add_column(header, no_wrap=True)
    for r in reports:
        slowest = max(r["time_to_isolate_s"].values(), default=None)
        table.add_row(
            r["name"],
            str(len(r["isolated"])),
            sim.offset_text(slowest) if slowest is not None else "-",
            str(len(r["returned"])),
            str(len(r["held"])),
            str(len(r.get("findings", []))),
            str(len(r["false_isolations"])),
            str(len(r["missed"])),
        )
    return table
