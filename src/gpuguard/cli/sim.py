"""``gpuguard sim``: run a scenario in the world simulator and show what happened.

``sim run`` plays a scenario with no guard attached and prints the world's timeline (what the
hardware, the hosts and the humans did, and how the cluster reacted); ``sim list`` shows the
scenarios shipped with gpuguard. The timeline helpers here are shared with ``gpuguard demo``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from gpuguard.cli import output
from gpuguard.errors import InputError
from gpuguard.model import durations
from gpuguard.sim import clock, scenario, state, store, world

app = typer.Typer(
    help=(
        "The world simulator: a fleet of GPU nodes, faults injected on a simulated clock, "
        "and the cluster's reaction. No real cluster needed.\n\n"
        "Try `gpuguard sim list`, then `gpuguard sim run xid79-twice`."
    ),
    no_args_is_help=True,
)

ScenarioArg = Annotated[str, typer.Argument(
    metavar="SCENARIO",
    help="A scenario file (YAML) or the name of a shipped scenario, e.g. xid79-twice.",
)]
HostsOpt = Annotated[Path | None, typer.Option(
    "--hosts", metavar="DIR",
    help="Also write each node's host tree (sys/, proc/, etc/, var/log/kern.log) "
         "under DIR/<node>/.",
)]


@app.command("run")
def run(
    scenario_ref: ScenarioArg,
    fmt: output.FormatOpt = output.Format.TABLE,
    as_json: output.JsonAlias = False,
    hosts: HostsOpt = None,
) -> None:
    """Run SCENARIO to its end with no guard and print the world's timeline.

    Columns: t (time since the scenario started), kind (the event or the world's reaction),
    node, detail. Exit status 2 when the scenario file is invalid.
    """
    spec = load_or_exit(scenario_ref)
    if hosts is not None and hosts.exists() and not hosts.is_dir():
        raise InputError(f"--hosts {hosts}: not a directory")
    played = play(spec, hosts)
    if not output.emit(world_json(played), output.chosen(fmt, as_json)):
        console = output.console
        console.print(output.bold(spec.name), f": {len(spec.nodes)} nodes, {len(spec.events)} "
                      f"events, runs {durations.format_duration(spec.end)}", sep="")
        console.print(timeline_table(played))
        console.print(final_table(played))


@app.command("list")
def list_scenarios(
    fmt: output.FormatOpt = output.Format.TABLE, as_json: output.JsonAlias = False
) -> None:
    """List the scenarios shipped with gpuguard and what each one shows."""
    shipped = [scenario.load_shipped(name) for name in scenario.shipped_names()]
    rows = [{"name": s.name, "nodes": len(s.nodes), "runs": durations.format_duration(s.end),
             "description": s.description} for s in shipped]
    if output.emit(rows, output.chosen(fmt, as_json)):
        return
    table = Table("name", "nodes", "runs", "description", show_lines=True)
    for spec in shipped:
        summary = spec.description.split(". ")[0].rstrip(".") + "."
        table.add_row(spec.name, str(len(spec.nodes)), durations.format_duration(spec.end),
                      summary)
    output.console.print(table)


def load_or_exit(ref: str) -> scenario.Scenario:
    """Load a scenario by path or shipped name; a bad one raises ScenarioError (exit 2)."""
    return scenario.resolve(ref)


_PROGRESS_STEPS = 100  # the run is stepped in this many slices, for the progress bar


def play(spec: scenario.Scenario, hosts: Path | None = None) -> world.World:
    """Run a scenario to its end with no guard attached (a progress bar on a terminal)."""
    played = world.World.from_scenario(spec, store.ObjectStore(), clock.SimClock(spec.start),
                                       hosts_root=hosts)
    slices = [spec.end * i / _PROGRESS_STEPS for i in range(1, _PROGRESS_STEPS + 1)]
    for offset in output.progress(slices, lambda at: offset_text(at.total_seconds())):
        played.step_to(offset)
    return played


def world_json(played: world.World) -> dict[str, Any]:
    spec = played.scenario
    return {
        "name": spec.name,
        "description": spec.description,
        "nodes": list(spec.node_names),
        "expect": {"isolate": list(spec.expect.isolate),
                   "never_isolate": list(spec.expect.never_isolate)},
        "timeline": [
            {"t": entry.t, "kind": entry.kind, "node": entry.node, "detail": entry.detail}
            for entry in played.timeline
        ],
        "final": [final_state(played, node) for node in played.nodes],
    }


def final_state(played: world.World, node: state.SimNode) -> dict[str, Any]:
    """Where a node ended: what the API server says and what its host shows."""
    obj = played.store.get("Node", "", node.name)
    return {
        "node": node.name,
        "ready": node.ready,
        "cordoned": bool(obj.get("spec", {}).get("unschedulable", False)),
        "gpu_capacity": node.gpu_capacity,
        "gpu_allocatable": node.gpu_allocatable_at(played.now),
        "boot_id": node.boot_id,
        "driver_module": node.driver_module,
        "driver_library": node.driver_library,
        "ipvs_loaded": node.ipvs_loaded,
    }


def final_table(played: world.World) -> Table:
    table = Table("node", "Ready", "GPUs", "cordoned", "driver module / NVML", "ip_vs",
                  title="at the end")
    for node in played.nodes:
        end = final_state(played, node)
        table.add_row(node.name, _yes(end["ready"]),
                      f"{end['gpu_allocatable']}/{end['gpu_capacity']}", _yes(end["cordoned"]),
                      f"{node.driver_module} / {node.driver_library}",
                      "loaded" if node.ipvs_loaded else "missing")
    return table


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def timeline_table(played: world.World) -> Table:
    table = Table("t", "kind", "node", "detail")
    for entry in played.timeline:
        table.add_row(offset_text(entry.t), entry.kind, entry.node or "-", entry.detail)
    return table


def offset_text(seconds: float) -> str:
    """Every unit of an offset, as scenarios write them: ``10m``, ``4d20h10m``, ``0s``."""
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{v}{u}" for v, u in ((days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")) if v]
    return "".join(parts) or "0s"
