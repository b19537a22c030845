"""``gpuguard demo``: the seed's incidents played in the simulator, no cluster needed.

Until the guard is wired in, the demo shows the world without it: the seed 004 Xid 79
incident (or the scenarios given) and what a guard will be scored against (``expect``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from gpuguard.cli import sim
from gpuguard.model import durations

DEFAULT_SCENARIO = "xid79-twice"
HEADER = (
    "[bold]gpuguard demo[/bold] — the seed's incidents in the built-in simulator.\n"
    "The guard is not wired in yet: this is the world [italic]without[/italic] it. Watch a GPU "
    "fall off the bus, allocatable drop while capacity stays, pods fail admission, and nothing "
    "isolates the node until someone power cycles it."
)


def demo(
    scenarios: Annotated[list[str] | None, typer.Option(
        "--scenario", metavar="FILE",
        help=f"A scenario file or shipped name (repeatable; default: {DEFAULT_SCENARIO}).",
    )] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    hosts: Annotated[Path | None, typer.Option(
        "--hosts", metavar="DIR", help="Also write the nodes' host trees under DIR.",
    )] = None,
) -> None:
    """Play seed incidents in the simulator and show what happened (runs in seconds)."""
    specs = [sim.load_or_exit(ref) for ref in (scenarios or [DEFAULT_SCENARIO])]
    played = [sim.play(spec, hosts / spec.name if hosts else None) for spec in specs]
    if as_json:
        typer.echo(json.dumps({"scenarios": [sim.world_json(w) for w in played]}, indent=2))
        return
    console = Console()
    console.print(HEADER)
    for world in played:
        spec = world.scenario
        console.print(f"\n[bold]{spec.name}[/bold] ({durations.format_duration(spec.end)})")
        console.print(spec.description)
        console.print(sim.timeline_table(world))
        console.print(sim.final_table(world))
        console.print(f"A guard must isolate: {', '.join(spec.expect.isolate) or '-'}; "
                      f"never isolate: {', '.join(spec.expect.never_isolate) or '-'}")
