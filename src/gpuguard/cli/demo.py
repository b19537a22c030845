"""``gpuguard demo``: the guard against real incidents (docs/design.md#incidents) and the
false-positive cases, in the built-in simulator — no cluster, no GPU, no Prometheus needed."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpuguard.cli import guard, output, sim
from gpuguard.demo import harness, score
from gpuguard.errors import SourceError
from gpuguard.model import durations
from gpuguard.model import settings as settings_model
from gpuguard.sim import scenario

HEADER = (
    "the guard ({settings}) against incidents from real training clusters and cases that must "
    "not trigger, in the built-in simulator. Real code paths: the isolation policy, lightkube "
    "over HTTP to the simulator's Kubernetes API, one merge patch per isolation, an Event per "
    "decision; the evidence Job runs the real collector on the node's host tree; the return to "
    "pool checks 11 conditions and runs the burn-in."
)
# The cluster's own guard, written after the incident, cordoned its Xid 79 after 12 min 26 s
# (docs/design.md#incidents).
EARLIER_GUARD_XID79 = "12m26s"
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
    config: guard.ConfigOpt = None,
    fmt: output.FormatOpt = output.Format.TABLE,
    as_json: output.JsonAlias = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Full timelines.")] = False,
) -> None:
    """Run the guard against scenarios in the simulator and print each timeline and its
    figures: time from fault to isolation, false isolations, misses, GPU-hours out.

    The guard uses your settings (--config and GPUGUARD_* variables), so you can try your
    own policy on the incidents. Exit status 1 when the guard missed a fault or isolated a
    node it must not (the scenario's expectations), 2 for a bad scenario or setting.

    Examples: gpuguard demo; gpuguard demo --scenario xid79-twice -o json;
    GPUGUARD_ISOLATION__HOLD_WINDOW=2m gpuguard demo; gpuguard sim list (the scenarios).
    """
    settings = guard.load_settings(config)
    refs = scenarios or list(scenario.shipped_names())
    specs = [sim.load_or_exit(ref) for ref in refs]
    reports = [score.scenario_report(harness.play(spec, settings))
               for spec in output.progress(specs, lambda spec: spec.name)]
    totals = score.totals(reports)
    if not output.emit({"scenarios": reports, "totals": totals}, output.chosen(fmt, as_json)):
        console = output.console
        console.print(output.bold("gpuguard demo"), " — ", HEADER.format(
            settings=_settings_line(settings)), sep="")
        for report in reports:
            _print_scenario(console, report, verbose)
        _print_uncut(console, _summary(reports))
    if totals["missed"] or totals["false_isolations"]:
        raise SourceError(
            f"the guard missed {totals['missed']} fault(s) and isolated "
            f"{totals['false_isolations']} node(s) it must not (see the figures above)"
        )


def _settings_line(settings: settings_model.GuardSettings) -> str:
    """The settings that shape the timelines, as the header states them."""
    iso = settings.isolation
    fast = ", ".join(str(x) for x in sorted(iso.fast_path_xids)) or "none"
    return (f"{durations.format_duration(settings.controller.interval)} tick, "
            f"{durations.format_duration(iso.hold_window)} hold window, fast path for Xid {fast}"
            ", the agents' node conditions read at once")


def _print_scenario(console: Console, report: dict[str, Any], verbose: bool) -> None:
    console.print("\n", output.bold(report["name"]), " — ", report["description"].strip(),
                  sep="")
    table = Table("t", "kind", "node", "reason / detail")
    for entry in report["timeline"]:
        if not verbose and entry["kind"] in QUIET_KINDS:
            continue
        style = "bold red" if entry["kind"] == "isolate" else ""
        why = " — ".join(x for x in (entry["reason"], entry["detail"]) if x)
        table.add_row(
            sim.offset_text(entry["t"]), entry["kind"], entry["node"] or "-", why, style=style
        )
    console.print(table)
    console.print(_figures(report))


def _figures(report: dict[str, Any]) -> Text:
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
    phantoms = [f for f in report.get("findings", []) if "wasted_w" in f]
    others = [f for f in report.get("findings", []) if "wasted_w" not in f]
    parts += [f"{f['kind']} on {f['node'] or '-'}: {f['detail']}" for f in others]
    if phantoms:
        wasted = sum(f.get("wasted_w", 0.0) for f in phantoms)
        parts.append(
            f"{len(phantoms)} phantom GPUs wasting ~{wasted:.0f} W (reported, not cordoned)"
        )
    parts += [
        f"GPU {g['gpu']} of {g['node']} isolated ({g['mechanism']}), the node serving"
        for g in report.get("gpu_isolated", [])
    ]
    parts += [_rollout(r) for r in report.get("rollouts", [])]
    parts.append(
        f"false isolations {len(report['false_isolations'])}, missed {len(report['missed'])},"
        f" GPU-hours out {report['gpu_hours_out']:g}"
        f" (healthy {report.get('healthy_gpu_hours_out', 0):g})"
    )
    return Text.assemble(("figures: ", "bold"), "; ".join(parts))


def _rollout(shown: dict[str, Any]) -> str:
    """A declared change in words: its state, each wave's time, the most nodes out at once."""
    waves = ", ".join(
        f"wave {i + 1} ({len(w['nodes'])}/{w['size']}) {w['result']}"
        + (f" in {sim.offset_text(w['took_s'])}" if w.get("took_s") is not None else "")
        for i, w in enumerate(shown.get("waves", []))
    )
    stopped = shown.get("stopped_by")
    why = f" by {stopped['node']}: {stopped['check']}" if stopped else ""
    return (f"change {shown['name']} {shown['state']}{why}: {waves}; at most "
            f"{shown.get('max_out', 0)} nodes out at once")


def _print_uncut(console: Console, table: Table) -> None:
    """The figures whole, wider than the terminal if they must be (a narrow terminal folds
    the long lines; a summary with its numbers cut says nothing)."""
    natural = console.measure(table, options=console.options.update_width(1000)).maximum
    width = console.width
    console.width = max(width, natural)
    try:
        console.print(table)
    finally:
        console.width = width


def _summary(reports: list[dict[str, Any]]) -> Table:
    table = Table(title=f"figures (the cluster's earlier guard isolated the Xid 79 incident "
                        f"after {EARLIER_GUARD_XID79})")
    table.add_column("scenario", no_wrap=True)
    for header in ("isolated", "GPUs isolated", "→ isolation", "returned", "held", "phantom",
                   "false", "missed", "health"):  # fmt: skip
        table.add_column(header, no_wrap=True)
    for r in reports:
        slowest = max(r["time_to_isolate_s"].values(), default=None)
        table.add_row(
            r["name"],
            str(len(r["isolated"])),
            str(len(r.get("gpu_isolated", []))),
            sim.offset_text(slowest) if slowest is not None else "-",
            str(len(r["returned"])),
            str(len(r["held"])),
            str(sum(1 for f in r.get("findings", []) if "wasted_w" in f)),
            str(len(r["false_isolations"])),
            str(len(r["missed"])),
            str(sum(1 for f in r.get("findings", []) if "wasted_w" not in f)),  # fleet health
        )
    return table
