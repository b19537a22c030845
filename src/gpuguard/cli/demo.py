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
    "simulator's Kubernetes API, one merge patch per isolation, an Event per decision."
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
    console = Console()
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


def _summary(reports: list[dict[str, Any]]) -> Table:
    table = Table(title="figures (seed: Xid 79 isolated after 12m26s by the seed's guard)")
    table.add_column("scenario", no_wrap=True)
    for header in ("isolated", "fault → isolation", "false", "missed", "GPU-h out"):
        table.add_column(header)
    for r in reports:
        latency = ", ".join(
            f"{node} {sim.offset_text(s)}" for node, s in r["time_to_isolate_s"].items()
        )
        table.add_row(
            r["name"],
            ", ".join(r["isolated"]) or "-",
            latency or "-",
            str(len(r["false_isolations"])),
            str(len(r["missed"])),
            f"{r['gpu_hours_out']:g}",
        )
    return table
