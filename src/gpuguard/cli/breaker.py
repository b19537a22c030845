"""``gpuguard breaker``: end a trip of the storm breaker (docs/breaker.md)."""

from __future__ import annotations

import getpass
import os
from datetime import UTC, datetime
from typing import Annotated

import typer

from gpuguard.actuators import nodes
from gpuguard.cli import guard, output
from gpuguard.controller import breaker, wiring
from gpuguard.sources import kubernetes

app = typer.Typer(
    help="The storm breaker: `gpuguard status` shows it; `reset` ends a trip.",
    no_args_is_help=True,
)


@app.command("reset")
def reset(
    kubeconfig: guard.KubeconfigOpt = None,
    kube_server: guard.ServerOpt = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Name the nodes; change nothing.")
    ] = False,
    who: Annotated[str | None, typer.Option("--by", help="Who resets (default: $USER).")] = None,
) -> None:
    """End a trip: remove the breaker-tripped marks from the nodes it withheld.

    Nothing stale is replayed: the next tick judges those nodes from current facts only. A
    fault that still holds is isolated within the breaker's rate and level limits; if as many
    candidates still appear at once, the breaker trips again (a shared cause: look at the
    evidence of the node it isolated at the trip before resetting twice).

    Example: gpuguard breaker reset --dry-run
    """
    by = who or os.environ.get("USER") or getpass.getuser()
    conn = guard.connection(kubeconfig, kube_server, None)
    with wiring.kube_client(conn) as client:
        outcome = breaker.reset(
            kubernetes.KubernetesReader(client),
            nodes.NodeWriter(client),
            who=by,
            now=datetime.now(UTC),
            dry_run=dry_run,
        )
    verb = "would reset" if dry_run else "reset"
    if not outcome.reset and not outcome.failed:
        output.console.print("the breaker is not tripped: no node carries a trip mark")
    for name in outcome.reset:
        output.console.print(f"{verb}: {name}", highlight=False)
    for name, why in outcome.failed:
        output.errors.print(f"not reset: {name}: {why}", highlight=False)
    if outcome.failed:
        raise typer.Exit(1)
