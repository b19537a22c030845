"""Placeholder for ``gpuguard sim`` (being built)."""

from __future__ import annotations

import typer

app = typer.Typer(help="The world simulator.", no_args_is_help=True)


@app.command("run")
def run() -> None:
    """Not built yet."""
    raise typer.Exit(3)
