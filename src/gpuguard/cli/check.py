"""Placeholder for `check` (being built)."""

from __future__ import annotations

import typer


def check() -> None:
    """Not built yet."""
    raise typer.Exit(3)
